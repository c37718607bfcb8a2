package ensemble

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerHealth follows which peers answer this member's raft calls (votes,
// heartbeats, appends: the outcome of each as the transport returns it)
// and reports changes, one line each:
//
//   - while no leader is known: "waiting for peers 2,3 (unreachable)",
//     again only when that set or a peer's reason changes, and "leader
//     known" once one is;
//   - on the leader: "peer 3 unreachable" when a follower stops answering
//     and "peer 3 reachable again" when it answers.
//
// raft itself logs every failed call (raftNoise demotes those lines), and
// retries several times a second.
type peerHealth struct {
	log *slog.Logger

	mu      sync.Mutex              // guards last and waiting
	last    map[raft.ServerID]error // latest call's outcome per peer; nil: it answered
	waiting string                  // what the member waits for, "" with a leader known
	changed chan struct{}           // a call's outcome differs from the one before
}

func newPeerHealth(l *slog.Logger) *peerHealth {
	return &peerHealth{log: l, last: map[raft.ServerID]error{}, changed: make(chan struct{}, 1)}
}

// note records the outcome of one raft call to peer id.
func (h *peerHealth) note(id raft.ServerID, err error) {
	h.mu.Lock()
	prev, seen := h.last[id]
	h.last[id] = err
	h.mu.Unlock()
	if !seen || (prev == nil) != (err == nil) || (err != nil && peerReason(prev) != peerReason(err)) {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// peerReason is the short reason a call to a peer failed: "unreachable"
// when no connection could be made (refused, timed out, no route), else
// the error itself (a TLS handshake refused, say).
func peerReason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "unreachable"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "unreachable"
	}
	return err.Error()
}

// Waiting says what the member waits for before it knows a leader, as
// "waiting for peers 2,3 (unreachable)" or "waiting for a leader"; ""
// once a leader is known.
func (h *peerHealth) Waiting() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

// downPeers groups the peers whose latest call failed by reason, and
// gives an error of each group.
type downGroup struct {
	reason string
	ids    []string
	err    error
}

func (h *peerHealth) down() []downGroup {
	h.mu.Lock()
	defer h.mu.Unlock()
	var groups []downGroup
	ids := make([]raft.ServerID, 0, len(h.last))
	for id := range h.last {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		err := h.last[id]
		if err == nil {
			continue
		}
		r := peerReason(err)
		i := slices.IndexFunc(groups, func(g downGroup) bool { return g.reason == r })
		if i < 0 {
			groups = append(groups, downGroup{reason: r, err: err})
			i = len(groups) - 1
		}
		groups[i].ids = append(groups[i].ids, string(id))
	}
	return groups
}

func waitingText(groups []downGroup) string {
	if len(groups) == 0 {
		return "waiting for a leader"
	}
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, strings.Join(g.ids, ",")+" ("+g.reason+")")
	}
	return "waiting for peers " + strings.Join(parts, ", ")
}

// run reports changes until ctx ends. leader is the leader this member
// knows ("" for none), leading whether it is this member. It looks on
// every change of a call's outcome and every tick, which catches a
// leader becoming known (raft tells of that on its own channels, each
// with one reader).
func (h *peerHealth) run(ctx context.Context, tick time.Duration, leader func() raft.ServerID, leading func() bool) {
	t := time.NewTicker(tick)
	defer t.Stop()
	var (
		logged     string              // the waiting line last logged
		since      time.Time           // start of the wait, zero with a leader known
		reported   = map[string]bool{} // peers the leader reported unreachable
		wasLeading bool
	)
	h.mu.Lock()
	h.waiting = "waiting for a leader"
	h.mu.Unlock()
	since = time.Now()
	for {
		if id := leader(); id == "" {
			if since.IsZero() {
				since = time.Now()
			}
			groups := h.down()
			text := waitingText(groups)
			h.mu.Lock()
			h.waiting = text
			h.mu.Unlock()
			// The bare "waiting for a leader" is only the status: the
			// start of an election says as much (raft's line).
			if text != logged && len(groups) > 0 {
				h.log.Info(text, "err", groups[0].err)
			}
			logged = text
			clear(reported)
		} else {
			if !since.IsZero() {
				if logged != "" && logged != "waiting for a leader" {
					h.log.Info("leader known", "leader", id, "waited", time.Since(since).Round(time.Millisecond))
				}
				since, logged = time.Time{}, ""
				h.mu.Lock()
				h.waiting = ""
				// Votes of the wait: a follower makes no calls to
				// refresh them, and the leader's heartbeats do at once.
				clear(h.last)
				h.mu.Unlock()
			}
			lead := leading()
			if lead != wasLeading {
				clear(reported)
				wasLeading = lead
			}
			if lead {
				h.reportFollowers(reported)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-h.changed:
		case <-t.C:
		}
	}
}

// reportFollowers logs, on the leader, each follower that stopped
// answering and each that answers again.
func (h *peerHealth) reportFollowers(reported map[string]bool) {
	h.mu.Lock()
	type change struct {
		id  string
		err error
	}
	var down, up []change
	for id, err := range h.last {
		switch {
		case err != nil && !reported[string(id)]:
			down = append(down, change{id: string(id), err: err})
		case err == nil && reported[string(id)]:
			up = append(up, change{id: string(id)})
		}
	}
	h.mu.Unlock()
	for _, c := range down {
		reported[c.id] = true
		h.log.Warn("peer "+c.id+" "+peerReason(c.err), "peer", c.id, "err", c.err)
	}
	for _, c := range up {
		delete(reported, c.id)
		h.log.Info("peer "+c.id+" reachable again", "peer", c.id)
	}
}

// healthTransport notes the outcome of raft's votes and appends to each
// peer in the member's peerHealth.
type healthTransport struct {
	*pushTransport
	health *peerHealth
}

func (t *healthTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, req *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	err := t.pushTransport.RequestVote(id, target, req, resp)
	t.health.note(id, err)
	return err
}

func (t *healthTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, req *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	err := t.pushTransport.RequestPreVote(id, target, req, resp)
	t.health.note(id, err)
	return err
}

func (t *healthTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.pushTransport.AppendEntries(id, target, req, resp)
	t.health.note(id, err)
	return err
}
