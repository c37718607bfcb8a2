package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
)

// Roles a node goes through.
const (
	roleJoining  = "joining"  // copying the data from the leader; not live
	roleFollower = "follower" // caught up: live (or about to announce), a candidate
	roleLeader   = "leader"
)

// Errors a write can end with before it is acknowledged.
var (
	errNotLeader  = errors.New("not the leader")
	errNotServing = errors.New("leader not serving yet: reaching the live followers")
	errLeaseShort = errors.New("leader's session lease too short to acknowledge: another leader may be elected")
	errSuperseded = errors.New("a newer leader exists")
	// errUnacknowledged wraps the reason a write that was applied on the
	// leader was not acknowledged.
	errUnacknowledged = errors.New("not acknowledged")
)

// memberInfo is the data of a node's nodes in the "all" and "live"
// folders and of its election candidate node.
type memberInfo struct {
	Name string `json:"name"`
	Addr string `json:"addr"` // host:port of its HTTP server
}

func (m memberInfo) encode() []byte { b, _ := json.Marshal(m); return b }

func decodeMember(b []byte) memberInfo {
	var m memberInfo
	_ = json.Unmarshal(b, &m)
	return m
}

// leaderView is the election's leader as this node last observed it.
type leaderView struct {
	memberInfo
	Token int64 `json:"token"`
}

// config is a node's configuration, from its flags.
type config struct {
	Name           string
	Addr           string // advertised HTTP address
	Servers        []string
	Root           string
	SessionTimeout time.Duration
	DriftMargin    time.Duration
}

// node is one replicated-db process.
//
// Goroutines: the HTTP server's; run, which lives through sessions one
// after another; per session, a roster watcher and a leader observer that
// keep the cluster view current. writeMu orders everything a leader sends
// its followers (writes, joins, reconciliations): one at a time, each
// delivered to every follower before the next, so a follower receives
// them in the leader's order. mu guards the state below it and is never
// held across a network call.
type node struct {
	cfg  config
	log  *slog.Logger
	http *http.Client // pushes and joins: short timeout
	fwd  *http.Client // forwarded writes: they may wait for a follower's session to end

	writeMu sync.Mutex

	mu      sync.Mutex
	st      store
	role    string
	serving bool         // leader: every live follower reached in this term
	term    *recipe.Term // while leader
	leader  leaderView   // observed; Name empty when there is none
	roster  recipe.Roster
	joiners map[string]string // leader: name → addr of nodes given our data, not live yet
	synced  map[string]bool   // leader: followers known at our version in this term
	changed chan struct{}     // capacity 1: the roster or the leader changed
}

func newNode(cfg config, log *slog.Logger) *node {
	return &node{
		cfg:     cfg,
		log:     log,
		http:    &http.Client{Timeout: time.Second},
		fwd:     &http.Client{Timeout: 3 * cfg.SessionTimeout},
		st:      newStore(),
		role:    roleJoining,
		changed: make(chan struct{}, 1),
	}
}

func (n *node) membersDir() string  { return path.Join(n.cfg.Root, "members") }
func (n *node) electionDir() string { return path.Join(n.cfg.Root, "election") }
func (n *node) self() memberInfo    { return memberInfo{Name: n.cfg.Name, Addr: n.cfg.Addr} }

func (n *node) signal() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// run keeps the node in the cluster until ctx ends: a session that ends
// (expired: the others have dropped this node from live and, if it led,
// elected another) is replaced by a new one, and the node joins again.
func (n *node) run(ctx context.Context) error {
	for {
		c, err := client.Connect(ctx, client.Config{Servers: n.cfg.Servers, SessionTimeout: n.cfg.SessionTimeout, Logger: n.log.With("part", "client")})
		if err != nil {
			return err
		}
		err = n.session(ctx, c)
		c.Close()
		if ctx.Err() != nil {
			return nil
		}
		n.log.Warn("session ended; joining again with a new one", "err", err)
		n.setRole(roleJoining)
	}
}

// session runs one session: registration, then rounds of join, announce,
// campaign, follow or lead.
func (n *node) session(ctx context.Context, c *client.Client) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := recipe.NewGroup(c, n.membersDir(), nil)
	e := recipe.NewElection(c, n.electionDir(), nil)
	if err := g.Register(sctx, n.cfg.Name, n.self().encode()); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for r := range g.Watch(sctx) {
			n.mu.Lock()
			n.roster = r
			n.mu.Unlock()
			n.signal()
		}
	}()
	go func() {
		defer wg.Done()
		for l := range e.Observe(sctx) {
			v := leaderView{memberInfo: decodeMember(l.Value), Token: l.Token}
			n.mu.Lock()
			n.leader = v
			n.st.hear(l.Token)
			n.mu.Unlock()
			n.log.Info("leader observed", "leader", v.Name, "token", v.Token)
			n.signal()
		}
	}()
	defer wg.Wait()
	defer cancel()
	for {
		if err := n.round(sctx, c, g, e); err != nil {
			return err
		}
	}
}

// round is one membership round: copy the data, announce, campaign, and
// follow or lead until the node must join again. It returns an error only
// when the session is over.
func (n *node) round(ctx context.Context, c *client.Client, g *recipe.Group, e *recipe.Election) error {
	n.setRole(roleJoining)
	if err := n.catchUp(ctx, c, g, e); err != nil {
		return err
	}
	// Caught up: from here every write of the leader reaches this node,
	// as a joiner first, then as a live follower.
	n.setRole(roleFollower)
	presence, err := g.Announce(ctx, n.cfg.Name, n.self().encode())
	if err != nil {
		return err
	}
	n.log.Info("live", "znode", presence.Node())
	cctx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case <-presence.Done():
		case <-cctx.Done():
		}
		stop()
	}()
	term, err := e.Campaign(cctx, n.self().encode())
	stop()
	if err != nil {
		if perr := presence.Err(); perr != nil && ctx.Err() == nil && c.Err() == nil {
			// Evicted from live while waiting: the leader stopped
			// sending to this node, so copy again before announcing.
			n.log.Warn("no longer live; joining again", "err", perr)
			return nil
		}
		return err
	}
	n.lead(ctx, term, presence)
	// Whatever ended the term, this node's data may hold writes the next
	// leader never got: withdraw and copy again.
	n.stepDown(ctx, term, presence)
	return c.Err()
}

func (n *node) setRole(r string) {
	n.mu.Lock()
	n.role = r
	n.mu.Unlock()
}

// catchUp copies the data from the current leader. With no leader and no
// other live node there is nothing to copy (the first node, or the data
// died with the last node: it lives in memory only). With no leader but
// other live nodes, an election is under way: wait for its outcome.
func (n *node) catchUp(ctx context.Context, c *client.Client, g *recipe.Group, e *recipe.Election) error {
	backoff := 20 * time.Millisecond
	for {
		l, err := e.Leader(ctx)
		switch {
		case errors.Is(err, recipe.ErrNoLeader):
			r, err := g.Roster(ctx)
			if err != nil {
				return err
			}
			others := 0
			for _, m := range r.Live {
				if m.Name != n.cfg.Name {
					others++
				}
			}
			if others == 0 {
				return nil
			}
		case err != nil:
			return err
		default:
			lm := decodeMember(l.Value)
			if err := n.join(ctx, lm); err == nil {
				n.log.Info("copied the data from the leader", "leader", lm.Name)
				return nil
			} else {
				n.log.Info("join failed; trying again", "leader", lm.Name, "err", err)
			}
		}
		select {
		case <-time.After(backoff):
		case <-n.changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.Done():
			return c.Err()
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// join asks the leader for its data. The leader sends it as a full push,
// in order with its writes, and counts this node among its followers
// from then on.
func (n *node) join(ctx context.Context, leader memberInfo) error {
	resp, err := postJSON(ctx, n.fwd, "http://"+leader.Addr+"/internal/join", n.self())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("leader %s: %s", leader.Name, readError(resp))
	}
	return nil
}

// lead serves as leader until the term ends, the node is evicted from
// live, or ctx ends.
func (n *node) lead(ctx context.Context, term *recipe.Term, presence *recipe.Presence) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-term.Done():
		case <-presence.Done():
		case <-lctx.Done():
		}
		cancel()
	}()
	n.mu.Lock()
	n.role, n.term, n.serving = roleLeader, term, false
	n.st.hear(term.Token())
	n.joiners, n.synced = map[string]string{}, map[string]bool{}
	n.mu.Unlock()
	n.log.Info("elected leader", "token", term.Token())
	for {
		// Reach every live follower: tell it this term's token (so the
		// previous leader can no longer change it) and bring it to our
		// version. Done again for every follower that becomes live.
		if err := n.reconcile(lctx, term); err != nil {
			n.log.Warn("leadership ends", "err", err)
			return
		}
		n.mu.Lock()
		if !n.serving {
			n.serving = true
			n.log.Info("serving writes", "version", n.st.version)
		}
		n.mu.Unlock()
		select {
		case <-n.changed:
		case <-lctx.Done():
			n.log.Info("leadership ends", "term", term.Err(), "presence", presence.Err())
			return
		}
	}
}

// stepDown stops serving as leader, resigns if the term still lasts, and
// withdraws from live.
func (n *node) stepDown(ctx context.Context, term *recipe.Term, presence *recipe.Presence) {
	n.mu.Lock()
	n.role, n.term, n.serving = roleJoining, nil, false
	n.joiners, n.synced = nil, nil
	n.mu.Unlock()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.SessionTimeout)
	defer cancel()
	if term.Err() == nil {
		if err := term.Resign(dctx); err != nil {
			n.log.Warn("resign", "err", err)
		}
	}
	if err := presence.Withdraw(dctx); err != nil {
		n.log.Warn("withdraw", "err", err)
	}
}

// leading returns the term if this node may acknowledge a write now: it
// leads, has reached its followers, has heard of no newer leader, and its
// session is proven alive for longer than the drift margin (no other
// leader can be elected before the session expires).
func (n *node) leading() (*recipe.Term, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leadingLocked()
}

func (n *node) leadingLocked() (*recipe.Term, error) {
	t := n.term
	switch {
	case n.role != roleLeader || t == nil:
		return nil, errNotLeader
	case n.st.fence > t.Token():
		return nil, errSuperseded
	case time.Until(t.Until()) < n.cfg.DriftMargin:
		return nil, errLeaseShort
	}
	return t, nil
}
