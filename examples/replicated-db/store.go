package main

import "maps"

// version names a state of the store: the token of the leader that wrote
// it and the count of that leader's writes. Every write of a leader has
// the version after its predecessor's, so a follower that holds version v
// has exactly the writes up to v, in the leader's order.
type version struct {
	Term int64 `json:"term"`
	Seq  int64 `json:"seq"`
}

// next is the version of the write after v by the leader with token.
func (v version) next(token int64) version {
	if v.Term == token {
		return version{Term: token, Seq: v.Seq + 1}
	}
	return version{Term: token, Seq: 1}
}

// pushKind says what a push carries.
type pushKind string

const (
	// pushPut is one write, on top of version Prev.
	pushPut pushKind = "put"
	// pushSync carries nothing: it checks that the follower is at Prev
	// and tells it the leader's token.
	pushSync pushKind = "sync"
	// pushFull replaces the follower's whole store.
	pushFull pushKind = "full"
)

// push is what a leader sends a follower.
type push struct {
	Kind    pushKind          `json:"kind"`
	Token   int64             `json:"token"` // the sending leader's election token
	Prev    version           `json:"prev"`  // the version the follower must be at (put, sync)
	Version version           `json:"version"`
	Key     string            `json:"key,omitempty"`
	Value   string            `json:"value,omitempty"`
	Data    map[string]string `json:"data,omitempty"` // full
}

// outcome is what a follower did with a push.
type outcome string

const (
	applied outcome = "applied"
	// stale: the push came from a leader older than one the follower
	// already heard from; it was refused.
	stale outcome = "stale"
	// gap: the follower is not at the push's Prev (it missed a write, or
	// holds one the leader never acknowledged); the leader sends its
	// whole store instead.
	gap outcome = "gap"
)

// store is a node's copy of the database. It is not safe for concurrent
// use; node.mu guards it.
type store struct {
	data    map[string]string
	version version
	// fence is the highest leader token heard from (in pushes, or by
	// observing the election). Pushes with a lower one are refused, so
	// a deposed leader that has not noticed cannot change a follower
	// that its successor has reached.
	fence int64
}

func newStore() store { return store{data: map[string]string{}} }

// apply applies p, unless it is stale or does not fit.
func (s *store) apply(p push) outcome {
	if p.Token < s.fence {
		return stale
	}
	s.fence = p.Token
	switch p.Kind {
	case pushFull:
		s.data = maps.Clone(p.Data)
		if s.data == nil {
			s.data = map[string]string{}
		}
		s.version = p.Version
		return applied
	case pushSync:
		if s.version != p.Prev {
			return gap
		}
		return applied
	case pushPut:
		if s.version != p.Prev {
			return gap
		}
		s.data[p.Key] = p.Value
		s.version = p.Version
		return applied
	}
	return gap
}

// full is a push of the whole store, by the leader with token.
func (s *store) full(token int64) push {
	return push{Kind: pushFull, Token: token, Version: s.version, Data: maps.Clone(s.data)}
}

// hear raises the fence to a leader token learned from the election.
func (s *store) hear(token int64) {
	if token > s.fence {
		s.fence = token
	}
}
