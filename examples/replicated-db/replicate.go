package main

// The leader's side of a write: who its followers are, and delivering
// each write to every one of them before it is acknowledged.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/coordrun/coordrun/ensemble/client/recipe"
)

// target is a follower a leader sends to.
type target struct{ name, addr string }

// targetsLocked are the followers: the live nodes but this one, and the
// joiners.
func (n *node) targetsLocked() []target {
	var ts []target
	seen := map[string]bool{n.cfg.Name: true}
	for _, m := range n.roster.Live {
		if !seen[m.Name] {
			seen[m.Name] = true
			ts = append(ts, target{name: m.Name, addr: decodeMember(m.Data).Addr})
		}
	}
	for name, addr := range n.joiners {
		if !seen[name] {
			seen[name] = true
			ts = append(ts, target{name: name, addr: addr})
		}
	}
	return ts
}

// stillTarget reports whether t is still a follower, and drops it from the
// joiners: a joiner that cannot be reached is given up on (it is not live,
// so nothing was promised about it; if it announces itself later, the
// leader brings it up to date then).
func (n *node) stillTarget(t target) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.roster.IsLive(t.name) {
		return true
	}
	delete(n.joiners, t.name)
	delete(n.synced, t.name)
	return false
}

// put is a write on the leader: apply it, deliver it to every follower,
// and acknowledge it only then, and only if still leading.
func (n *node) put(key, value string) (version, error) {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	n.mu.Lock()
	if !n.serving {
		n.mu.Unlock()
		if _, err := n.leading(); err != nil {
			return version{}, err
		}
		return version{}, errNotServing
	}
	term, err := n.leadingLocked()
	if err != nil {
		n.mu.Unlock()
		return version{}, err
	}
	p := push{Kind: pushPut, Token: term.Token(), Prev: n.st.version, Version: n.st.version.next(term.Token()), Key: key, Value: value}
	n.st.apply(p)
	targets := n.targetsLocked()
	n.mu.Unlock()
	if err := n.deliverAll(term, targets, p); err != nil {
		return version{}, fmt.Errorf("%w: %w", errUnacknowledged, err)
	}
	// Delivering may have taken a while (a dead follower's session had
	// to end first): check again that no other leader can exist.
	if _, err := n.leading(); err != nil {
		return version{}, fmt.Errorf("%w: %w", errUnacknowledged, err)
	}
	return p.Version, nil
}

// reconcile brings every follower not yet known to be at our version to
// it, with a sync push (a full one where that does not fit).
func (n *node) reconcile(ctx context.Context, term *recipe.Term) error {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	n.mu.Lock()
	if n.term != term {
		n.mu.Unlock()
		return errNotLeader
	}
	var todo []target
	current := map[string]bool{}
	for _, t := range n.targetsLocked() {
		current[t.name] = true
		if !n.synced[t.name] {
			todo = append(todo, t)
		}
	}
	// A follower that left is reached again if it comes back.
	for name := range n.synced {
		if !current[name] {
			delete(n.synced, name)
		}
	}
	p := push{Kind: pushSync, Token: term.Token(), Prev: n.st.version, Version: n.st.version}
	n.mu.Unlock()
	return n.deliverAll(term, todo, p)
}

// deliverAll delivers p to every target at once and waits for all.
func (n *node) deliverAll(term *recipe.Term, targets []target, p push) error {
	errs := make(chan error, len(targets))
	for _, t := range targets {
		go func() { errs <- n.deliver(term, t, p) }()
	}
	var first error
	for range targets {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// deliver sends p to one follower until it has it: a follower that is
// behind (or ahead, with a write never acknowledged) gets the whole store.
// An unreachable follower is retried for as long as it is live: its
// session ends within the session timeout if it is dead, and then it is
// no longer owed the write.
func (n *node) deliver(term *recipe.Term, t target, p push) error {
	backoff := 20 * time.Millisecond
	for {
		select {
		case <-term.Done():
			return errNotLeader
		default:
		}
		res, err := n.sendPush(t.addr, p)
		if err == nil {
			switch res.Outcome {
			case applied:
				n.mu.Lock()
				if n.synced != nil {
					n.synced[t.name] = true
				}
				n.mu.Unlock()
				return nil
			case gap:
				n.mu.Lock()
				if n.term != term {
					n.mu.Unlock()
					return errNotLeader
				}
				// writeMu is held: the store is at p's version.
				p = n.st.full(term.Token())
				n.mu.Unlock()
				continue
			case stale:
				n.mu.Lock()
				n.st.hear(res.Fence)
				n.mu.Unlock()
				return fmt.Errorf("%w (follower %s heard of token %d)", errSuperseded, t.name, res.Fence)
			}
			err = fmt.Errorf("unexpected outcome %q", res.Outcome)
		}
		if !n.stillTarget(t) {
			return nil
		}
		n.log.Debug("follower unreachable; retrying while it is live", "follower", t.name, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-term.Done():
			timer.Stop()
			return errNotLeader
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// pushReply is a follower's answer to a push.
type pushReply struct {
	Outcome outcome `json:"outcome"`
	Version version `json:"version"`
	Fence   int64   `json:"fence"`
}

func (n *node) sendPush(addr string, p push) (pushReply, error) {
	var r pushReply
	resp, err := postJSON(context.Background(), n.http, "http://"+addr+"/internal/push", p)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("push to %s: %s", addr, readError(resp))
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// receive applies a push from a leader.
func (n *node) receive(p push) pushReply {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.st.apply(p)
	return pushReply{Outcome: o, Version: n.st.version, Fence: n.st.fence}
}

// admit is the leader's side of a join: send the joiner the whole store
// and count it as a follower from then on, both under writeMu so that no
// write falls between the two.
func (n *node) admit(m memberInfo) error {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	n.mu.Lock()
	if !n.serving {
		n.mu.Unlock()
		return errNotServing
	}
	term, err := n.leadingLocked()
	if err != nil {
		n.mu.Unlock()
		return err
	}
	p := n.st.full(term.Token())
	n.mu.Unlock()
	res, err := n.sendPush(m.Addr, p)
	if err != nil {
		return err
	}
	if res.Outcome != applied {
		return fmt.Errorf("joiner %s: %s (fence %d)", m.Name, res.Outcome, res.Fence)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.term != term {
		return errNotLeader
	}
	n.joiners[m.Name] = m.Addr
	n.synced[m.Name] = true
	n.log.Info("admitted", "joiner", m.Name, "version", p.Version)
	return nil
}

// clusterView is what GET /cluster shows.
type clusterView struct {
	Name    string     `json:"name"`
	Role    string     `json:"role"`
	Serving bool       `json:"serving,omitempty"`
	Leader  leaderView `json:"leader"`
	Live    []string   `json:"live"`
	All     []string   `json:"all"`
	Version version    `json:"version"`
	Keys    int        `json:"keys"`
}

func (n *node) view() clusterView {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := clusterView{
		Name: n.cfg.Name, Role: n.role, Serving: n.serving, Leader: n.leader,
		Live: []string{}, All: []string{}, Version: n.st.version, Keys: len(n.st.data),
	}
	for _, m := range n.roster.Live {
		v.Live = append(v.Live, m.Name)
	}
	for _, m := range n.roster.All {
		v.All = append(v.All, m.Name)
	}
	return v
}
