package statuspage

import (
	"context"
	"errors"
	"time"
)

// What the page reads of the member that serves it. The member implements
// Source; the page keeps no state of the ensemble besides the samples for
// its charts and the holders it saw come and go.

// Errors a Tree returns, for the page to say why a node is not shown.
var (
	// ErrNoNode: there is no such node.
	ErrNoNode = errors.New("no such node")
	// ErrNoAuth: the node's ACL does not let an unauthenticated client
	// read it.
	ErrNoAuth = errors.New("not readable without credentials")
)

// Source is the member as the page sees it. Its methods are called from
// several goroutines at once (page requests and the broadcaster).
type Source interface {
	// ID is the serving member's id.
	ID() string
	// Ensemble is every member's report as this member gathers it now:
	// its own, and the others' asked over the peer port until ctx ends
	// (one that does not answer is reported with its error).
	Ensemble(ctx context.Context) []MemberReport
	// Counters are this member's figures now.
	Counters() Counters
	// ReadTree runs fn with the replicated tree as an unauthenticated
	// client sees it, all reads in fn of one state of it. fn must be
	// short and must not keep t: writes wait while it runs.
	ReadTree(fn func(t Tree))
	// Session is what this member knows of a live session's liveness.
	Session(id int64) SessionState
}

// MemberReport is one member's report of itself.
type MemberReport struct {
	ID           string
	Role         string // leader, follower, candidate, shutdown, unreachable
	Leader       string // the leader this member knows, "" for none
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	ClientAddr   string
	PeerAddr     string
	// Started is when the member started; zero when it did not say (a
	// member of an older version, or one that did not answer).
	Started  time.Time
	Sessions int
	Znodes   int
	// Error is why the member could not be asked; "" when it answered.
	Error string
	// Alarms are the member's raised alarms (a full disk, say).
	Alarms []string
}

// Counters are the serving member's figures at one moment.
type Counters struct {
	Sessions int
	Znodes   int
	Watches  int
	// Requests counts the client requests this member answered since it
	// started; rates come from the difference of two samples.
	Requests int64
	// Latency is the histogram of those requests' latency: cumulative
	// counts of requests at most Le seconds, rising Le, the last +Inf.
	Latency []Bucket
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	Le    float64 // upper bound in seconds
	Count uint64  // requests at most Le
}

// Tree reads znodes as a client without credentials: only ACL entries of
// world:anyone grant it anything.
type Tree interface {
	// Get is a node's data and stat; it needs READ.
	Get(path string) ([]byte, Stat, error)
	// FirstChildren is at most n of a node's children, the first in
	// cmp's order (a total order; nil: by name), sorted by it, and the
	// node's stat, whose NumChildren counts them all; it needs READ. Its
	// cost grows with n, not with the number of children: the page
	// never asks for them all, since a folder anyone may write to can
	// hold hundreds of thousands and the read holds up writes.
	FirstChildren(path string, n int, cmp func(a, b string) int) ([]string, Stat, error)
	// Exists is a node's stat; like ZooKeeper's exists it needs no right.
	Exists(path string) (Stat, error)
	// ACL is a node's ACL; it needs READ or ADMIN.
	ACL(path string) ([]ACL, error)
	// SessionLive reports whether a session is live in the tree.
	SessionLive(id int64) bool
}

// Stat is a znode's stat, with ZooKeeper's field names.
type Stat struct {
	Czxid          int64 `json:"czxid"`
	Mzxid          int64 `json:"mzxid"`
	Pzxid          int64 `json:"pzxid"`
	Ctime          int64 `json:"ctime"` // ms since the epoch
	Mtime          int64 `json:"mtime"`
	Version        int32 `json:"version"`
	Cversion       int32 `json:"cversion"`
	Aversion       int32 `json:"aversion"`
	EphemeralOwner int64 `json:"-"` // session id; JSON has it as hex (NodeView)
	DataLength     int32 `json:"dataLength"`
	NumChildren    int32 `json:"numChildren"`
}

// ACL is one entry of a node's ACL.
type ACL struct {
	Perms  int32  `json:"perms"`
	Scheme string `json:"scheme"`
	ID     string `json:"id"`
}

// SessionState is what a member knows of a session's liveness. Only the
// leader tracks it (it alone expires sessions); elsewhere Tracked is
// false.
type SessionState struct {
	Tracked bool
	// Silent is how long the leader has not heard from the session, and
	// Timeout its negotiated timeout.
	Silent  time.Duration
	Timeout time.Duration
}
