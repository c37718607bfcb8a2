package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The lock recipe.
//
// The queue. Every contender creates an ephemeral sequential node in the
// lock's folder, "lock-<id>-<seq>"; the lowest sequence number is next to
// hold the lock. Each waiter watches only its immediate predecessor, so a
// release wakes exactly one waiter (no herd), and it re-checks the queue
// after every wake-up: the predecessor may have left without the lock ever
// having been free. The random id, chosen before the create, lets a
// contender whose create reply was lost find its own node instead of
// creating a second one (a ghost that would hold the lock forever for a
// session that thinks it is still waiting).
//
// The run node. The queue gives the order, but any client with rights on
// the folder can delete a queue node, and then the next in line would
// start while the holder's job still runs. So the lowest contender does
// not start on its queue position alone: it must also create the folder's
// one ephemeral "run" node, in a multi that checks its own queue node
// still exists and records it as holder. The holder deletes the run node
// (with its queue node, in one multi) only once its job's whole process
// group is gone; until then the next in line finds the run node taken and
// watches it. A run node whose owner's session ends vanishes with it, so a
// crashed holder is replaced one session timeout after its crash.
//
// The folder's data records the last holder: "held <node>" while a holder
// runs, "released <node>" once it let go cleanly (in the multi that deletes
// its nodes). A new holder that finds "held" naming another node knows the
// previous holder's session ended instead, which is when --lock-delay
// applies.
//
// Interference. The holder watches its own queue node and run node while
// the job runs; a change or deletion by someone else stops the job (see
// Run). The next in line cannot always tell a deletion by someone else from
// the holder's crash: both make the holder's nodes vanish. When it sees
// evidence of interference (its own node gone while its session lives, the
// run node held by a contender that is no longer queued, the holder queued
// without its run node), it does not trust the vanishing run node: unless
// the old holder confirms its end ("released <node>"), it waits until the
// old holder's job must be dead whatever happened to it, one session
// timeout plus kill grace after the evidence (the old holder stops its job
// once it hears of the deletion, or once its lease runs out). A client that
// deletes exactly the holder's two nodes at once is indistinguishable from
// the holder's crash; against that, only ACLs help (see Options.ACL).

const (
	nodePrefix = "lock-"
	runNode    = "run"
)

// HolderInfo is the data of a contender's node: who is waiting or holding.
type HolderInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
	// SessionTimeoutMS and KillGraceMS bound how long the contender's job
	// can outlive its standing: a successor that suspects interference
	// waits that long.
	SessionTimeoutMS int64 `json:"session_timeout_ms,omitempty"`
	KillGraceMS      int64 `json:"kill_grace_ms,omitempty"`
}

// outlives is how long after it loses its standing a contender's job may
// still run: until its lease runs out, then its kill grace.
func (h HolderInfo) outlives() time.Duration {
	return time.Duration(h.SessionTimeoutMS+h.KillGraceMS)*time.Millisecond + killSlack
}

// RunInfo is the data of the run node: the holder and since when it holds.
type RunInfo struct {
	Node  string `json:"node"` // the holder's queue node, its base name
	Token int64  `json:"token"`
	HolderInfo
	// Stopping: the holder lost its standing and keeps the run node only
	// until its job is gone.
	Stopping bool `json:"stopping,omitempty"`
}

// QueueStatus is a contender's view of the queue.
type QueueStatus struct {
	Position   int // 0: next to hold, or holding
	Length     int
	Holder     HolderInfo // of the run node's owner; Since is when it took the lock
	HolderNode string
	// Stopping: the previous holder still runs its job although it left
	// the queue (position 0 waits for it).
	Stopping bool
}

// ErrNotAcquired: the lock was not had (--try, or --timeout expired).
var ErrNotAcquired = errors.New("lock not acquired")

// AccessError: the session may not create what the lock needs.
type AccessError struct {
	Path     string
	ACL      []wire.ACL // the ACL found on Path, if it could be read
	Identity []string   // the session's identities, if known
	Err      error
}

func (e *AccessError) Error() string {
	who := "an unauthenticated session"
	if len(e.Identity) > 0 {
		who = strings.Join(e.Identity, ", ")
	}
	acl := "unreadable"
	if e.ACL != nil {
		acl = FormatACL(e.ACL)
	}
	return fmt.Sprintf("no permission to join %s (ACL %s) as %s: %v; configure --auth or a client certificate that the ACL grants, or have an admin setAcl the folder", e.Path, acl, who, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// entry is one contender's place in a lock's queue, and its hold.
//
// Not safe for concurrent use, except the standing watch (see standing).
type entry struct {
	c    *client.Client
	dir  string
	id   string
	acl  []wire.ACL
	info HolderInfo
	log  *slog.Logger

	node  string // full path of our queue node, once created
	czxid int64  // its czxid: the fencing token

	lastHolder RunInfo   // the run node's data as last seen while waiting
	suspect    suspicion // evidence of interference with the previous holder

	// Set once held.
	heldSince   time.Time
	heldVersion int32 // the folder's version after our "held" record
	prevRecord  string

	// armed is closed once the standing watches are set: a release waits
	// for it, so that they fire (at our own deletes) however short the
	// job, and not at a later holder's nodes.
	armed <-chan struct{}

	mu         sync.Mutex
	runRemade  bool // the run node was deleted under us and created again
	standingOK bool // nobody touched our nodes while we held
}

// suspicion: a previous holder's job may still run although its nodes are
// gone, at most until until; released confirms its end earlier.
type suspicion struct {
	owner string // its queue node's base name
	until time.Time
	why   string
}

func (e *entry) suspectHolder(owner string, info HolderInfo, why string) {
	if info.SessionTimeoutMS == 0 {
		// Its settings are unknown: assume ours.
		info.SessionTimeoutMS, info.KillGraceMS = e.info.SessionTimeoutMS, e.info.KillGraceMS
	}
	until := time.Now().Add(info.outlives())
	if e.suspect.owner == owner && e.suspect.until.After(until) {
		return
	}
	if e.suspect.owner != owner {
		e.log.Warn("lock nodes changed by another client; the previous holder's job may still run", "lock_dir", e.dir, "holder_node", owner, "evidence", why, "wait_at_most", info.outlives().Round(time.Millisecond))
	}
	e.suspect = suspicion{owner: owner, until: until, why: why}
}

// ensurePath creates every missing persistent component of p with acl.
func ensurePath(ctx context.Context, c *client.Client, p string, acl []wire.ACL) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := c.Create(ctx, cur, nil, 0, acl)
		if err != nil && !errors.Is(err, wire.ErrNodeExists) {
			if errors.Is(err, wire.ErrNoAuth) {
				return accessError(ctx, c, path.Dir(cur), err)
			}
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// accessError describes a refusal on p for the user.
func accessError(ctx context.Context, c *client.Client, p string, err error) error {
	ae := &AccessError{Path: p, Err: err}
	if acl, _, gerr := c.GetACL(ctx, p); gerr == nil {
		ae.ACL = acl
	}
	if ids, werr := c.WhoAmI(ctx); werr == nil {
		for _, id := range ids {
			ae.Identity = append(ae.Identity, id.AuthScheme+":"+id.User)
		}
	}
	return ae
}

// enter joins the queue of the lock in dir.
func enter(ctx context.Context, c *client.Client, dir string, info HolderInfo, acl []wire.ACL, log *slog.Logger) (*entry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &entry{c: c, dir: dir, acl: acl, info: info, log: log}
	return e, e.join(ctx)
}

// join creates this contender's queue node (again, if it was deleted).
func (e *entry) join(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	e.id, e.node, e.czxid = hex.EncodeToString(rnd[:]), "", 0
	data, _ := json.Marshal(e.info)
	for {
		p, st, err := e.c.Create2(ctx, path.Join(e.dir, nodePrefix+e.id+"-"), data, wire.FlagEphemeralSequential, e.acl)
		if err == nil {
			e.node, e.czxid = p, st.Czxid
			return nil
		}
		switch {
		case errors.Is(err, wire.ErrNoNode):
			// First use of this lock: create its folders, then retry.
			// (Creating them up front would cost writes on every run.)
			if err := ensurePath(ctx, e.c, e.dir, e.acl); err != nil {
				return err
			}
			continue
		case errors.Is(err, wire.ErrNoAuth):
			return accessError(ctx, e.c, e.dir, err)
		case !errors.Is(err, client.ErrConnectionLoss):
			return fmt.Errorf("join queue %s: %w", e.dir, err)
		}
		// The create may or may not have happened: look for our id.
		found, err := e.find(ctx)
		if err != nil {
			return err
		}
		if found {
			return nil
		}
	}
}

func (e *entry) find(ctx context.Context) (bool, error) {
	for {
		// A create in flight on the lost connection may still commit;
		// sync first so the listing is at least as new as it.
		if err := e.c.Sync(ctx, e.dir); err != nil {
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			return false, fmt.Errorf("sync %s: %w", e.dir, err)
		}
		kids, _, err := e.c.Children(ctx, e.dir)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if errors.Is(err, wire.ErrNoNode) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("list %s: %w", e.dir, err)
		}
		for _, k := range kids {
			if strings.HasPrefix(k, nodePrefix+e.id+"-") {
				e.node = path.Join(e.dir, k)
				st, ok, err := e.c.Exists(ctx, e.node)
				if err != nil {
					return false, err
				}
				if !ok {
					return false, nil
				}
				e.czxid = st.Czxid
				return true, nil
			}
		}
		return false, nil
	}
}

// seqOf returns the sequence number of a queue node name, or -1.
func seqOf(name string) int64 {
	i := strings.LastIndexByte(name, '-')
	if !strings.HasPrefix(name, nodePrefix) || i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// sortQueue orders queue node names by sequence number, dropping names
// that are not queue nodes (the run node among them).
func sortQueue(kids []string) []string {
	out := kids[:0:0]
	for _, k := range kids {
		if seqOf(k) >= 0 {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return seqOf(out[i]) < seqOf(out[j]) })
	return out
}

func (e *entry) runPath() string { return path.Join(e.dir, runNode) }

// readRun reads the run node; ok is false when there is none.
func readRun(ctx context.Context, c *client.Client, dir string) (RunInfo, wire.Stat, bool, error) {
	b, st, err := c.Get(ctx, path.Join(dir, runNode))
	if errors.Is(err, wire.ErrNoNode) {
		return RunInfo{}, st, false, nil
	}
	if err != nil {
		return RunInfo{}, st, false, err
	}
	var ri RunInfo
	_ = json.Unmarshal(b, &ri)
	return ri, st, true, nil
}

// acquire blocks until this entry holds the lock: lowest in the queue and
// owner of the run node. With try set it returns ErrNotAcquired at once if
// another holds it. onStatus is called whenever the position, the holder
// or its state changes.
func (e *entry) acquire(ctx context.Context, try bool, onStatus func(QueueStatus)) error {
	var last QueueStatus
	report := func(st QueueStatus) {
		if st != last && onStatus != nil {
			onStatus(st)
		}
		last = st
	}
	for {
		var (
			kids   []string
			rec    []byte
			kerr   error
			recErr error
			wg     sync.WaitGroup
		)
		// The folder's record is needed only if we turn out lowest; it is
		// read alongside the listing so the handoff costs one round trip
		// before the multi, not two.
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, _, recErr = e.c.Get(ctx, e.dir)
		}()
		kids, _, kerr = e.c.Children(ctx, e.dir)
		wg.Wait()
		if kerr != nil {
			switch {
			case errors.Is(kerr, client.ErrConnectionLoss):
				continue
			case errors.Is(kerr, wire.ErrNoNode):
				// The whole folder went (deleteall), our node with it.
				if err := e.rejoin(ctx, "lock folder deleted"); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("list %s: %w", e.dir, kerr)
		}
		q := sortQueue(kids)
		me := path.Base(e.node)
		pos := -1
		for i, k := range q {
			if k == me {
				pos = i
			}
		}
		if pos < 0 {
			if err := e.rejoin(ctx, "own queue node deleted"); err != nil {
				return err
			}
			continue
		}
		if pos > 0 {
			st, err := e.waiterStatus(ctx, q, pos, rec)
			if err != nil {
				if errors.Is(err, client.ErrConnectionLoss) {
					continue
				}
				return err
			}
			report(st)
			if try {
				return ErrNotAcquired
			}
			if err := e.awaitGone(ctx, path.Join(e.dir, q[pos-1])); err != nil {
				return err
			}
			continue
		}
		if recErr != nil && !errors.Is(recErr, client.ErrConnectionLoss) {
			return fmt.Errorf("read %s: %w", e.dir, recErr)
		}
		if recErr != nil {
			continue
		}
		if s := e.suspect; s.owner != "" && string(rec) != "released "+s.owner && time.Now().Before(s.until) {
			// The previous holder's job may still run. Wait for it to
			// record its release (it does once its job is gone, unless
			// someone took the lock since), or for its job to be gone
			// whatever happened, before taking: taking would write the
			// record over.
			st := QueueStatus{Position: 0, Length: len(q), HolderNode: s.owner, Holder: e.lastHolder.HolderInfo, Stopping: true}
			report(st)
			if try {
				return ErrNotAcquired
			}
			if err := e.awaitRecord(ctx, s.until); err != nil {
				return err
			}
			continue
		}
		ok, busy, err := e.take(ctx, string(rec))
		if err != nil {
			return err
		}
		if ok {
			report(QueueStatus{Position: 0, Length: len(q), HolderNode: me, Holder: e.runInfo(false).HolderInfo})
			return nil
		}
		if busy == nil {
			continue // our node went, or the run node just did: look again
		}
		// The previous holder still runs; wait for its run node.
		inQueue := false
		for _, k := range q {
			inQueue = inQueue || k == busy.info.Node
		}
		if !inQueue {
			e.suspectHolder(busy.info.Node, busy.info.HolderInfo, "run node held by a contender no longer queued")
		}
		e.lastHolder = busy.info
		report(QueueStatus{Position: 0, Length: len(q), HolderNode: busy.info.Node, Holder: busy.info.HolderInfo, Stopping: true})
		if try {
			return ErrNotAcquired
		}
		if err := e.awaitEvent(ctx, busy.ch); err != nil {
			return err
		}
	}
}

// rejoin puts the entry back at the end of the queue after its node was
// deleted while its session lived: someone else deleted it, so whoever
// held the lock may still be running.
func (e *entry) rejoin(ctx context.Context, why string) error {
	select {
	case <-e.c.Done():
		return fmt.Errorf("queue node %s vanished: %w", e.node, e.c.Err())
	default:
	}
	holder := e.lastHolder
	if holder.Node == "" {
		// Never saw who held it: no release record can name it, so the
		// wait runs its full length.
		holder.Node = "(unknown)"
	}
	e.suspectHolder(holder.Node, holder.HolderInfo, why)
	e.log.Warn("queue node deleted by another client; joining the queue again", "node", e.node, "reason", why)
	return e.join(ctx)
}

// waiterStatus reads who holds the lock, for a contender at pos > 0, and
// notes evidence of interference: the head queued while the folder says
// it holds, but without its run node.
func (e *entry) waiterStatus(ctx context.Context, q []string, pos int, rec []byte) (QueueStatus, error) {
	st := QueueStatus{Position: pos, Length: len(q), HolderNode: q[0]}
	ri, _, ok, err := readRun(ctx, e.c, e.dir)
	if err != nil {
		return st, err
	}
	if ok {
		e.lastHolder = ri
		st.Holder, st.HolderNode, st.Stopping = ri.HolderInfo, ri.Node, ri.Stopping
		return st, nil
	}
	// No run node: the head is about to take the lock, or took it and
	// someone deleted its run node.
	b, _, err := e.c.Get(ctx, path.Join(e.dir, q[0]))
	if err != nil {
		if errors.Is(err, wire.ErrNoNode) {
			return st, nil
		}
		return st, err
	}
	var hi HolderInfo
	_ = json.Unmarshal(b, &hi)
	if string(rec) == "held "+q[0] {
		// The record and the run node are written in one multi, and the
		// head's session lives (its queue node is there): someone else
		// deleted the run node.
		e.suspectHolder(q[0], hi, "holder queued without its run node")
	}
	hi.Since = time.Time{} // not holding (yet)
	st.Holder = hi
	return st, nil
}

// awaitGone waits until node is deleted (or changed, or the watch ends).
func (e *entry) awaitGone(ctx context.Context, node string) error {
	_, ok, ch, err := e.c.ExistsW(ctx, node)
	if err != nil {
		if errors.Is(err, client.ErrConnectionLoss) {
			return nil
		}
		return fmt.Errorf("watch %s: %w", node, err)
	}
	if !ok {
		return nil
	}
	return e.awaitEvent(ctx, ch)
}

func (e *entry) awaitEvent(ctx context.Context, ch <-chan client.Event) error {
	select {
	case ev := <-ch:
		if ev.Err != nil && !errors.Is(ev.Err, client.ErrConnectionLoss) {
			return ev.Err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.c.Done():
		return e.c.Err()
	}
}

// awaitRecord waits until the folder's data changes or until passes.
func (e *entry) awaitRecord(ctx context.Context, until time.Time) error {
	_, _, ch, err := e.c.GetW(ctx, e.dir)
	if err != nil {
		if errors.Is(err, client.ErrConnectionLoss) || errors.Is(err, wire.ErrNoNode) {
			return nil
		}
		return fmt.Errorf("watch %s: %w", e.dir, err)
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case ev := <-ch:
		if ev.Err != nil && !errors.Is(ev.Err, client.ErrConnectionLoss) {
			return ev.Err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.c.Done():
		return e.c.Err()
	}
}

// busyRun is a run node another contender holds, with a watch on it.
type busyRun struct {
	info RunInfo
	ch   <-chan client.Event
}

// take tries to become the holder: in one multi, check that our queue node
// still exists, create the run node, and record us as holder. rec is the
// folder's record before. It returns ok once held; busy when another holds
// the run node (with a watch armed on it); neither when the state moved
// under us and the caller should look again.
func (e *entry) take(ctx context.Context, rec string) (ok bool, busy *busyRun, err error) {
	e.heldSince = time.Now().UTC().Truncate(time.Millisecond)
	data, _ := json.Marshal(e.runInfo(false))
	me := path.Base(e.node)
	res, err := e.c.Multi(ctx,
		wire.MultiOp{Type: wire.OpCheck, Path: e.node, Version: -1},
		wire.MultiOp{Type: wire.OpCreate, Path: e.runPath(), Data: data, ACL: e.acl, Flags: wire.FlagEphemeral},
		wire.MultiOp{Type: wire.OpSetData, Path: e.dir, Data: []byte("held " + me), Version: -1})
	if err == nil {
		e.held(rec, res[2].Stat.Version)
		return true, nil, nil
	}
	if errors.Is(err, client.ErrConnectionLoss) {
		return e.resolveTake(ctx, rec)
	}
	failed := -1
	for i, r := range res {
		if r.Err != wire.OK && r.Err != wire.ErrRuntimeInconsistency {
			failed = i
		}
	}
	switch {
	case failed == 0 && errors.Is(err, wire.ErrNoNode):
		return false, nil, nil // our node went; the caller's listing shows it
	case failed == 1 && errors.Is(err, wire.ErrNodeExists):
		b, st, ch, gerr := e.c.GetW(ctx, e.runPath())
		if errors.Is(gerr, wire.ErrNoNode) {
			return false, nil, nil
		}
		if gerr != nil {
			if errors.Is(gerr, client.ErrConnectionLoss) {
				return false, nil, nil
			}
			return false, nil, fmt.Errorf("read %s: %w", e.runPath(), gerr)
		}
		if st.EphemeralOwner == e.c.SessionID() {
			// Ours, from an attempt whose reply was lost.
			return e.resolveTake(ctx, rec)
		}
		var ri RunInfo
		_ = json.Unmarshal(b, &ri)
		return false, &busyRun{info: ri, ch: ch}, nil
	case errors.Is(err, wire.ErrNoAuth):
		return false, nil, accessError(ctx, e.c, e.dir, err)
	}
	return false, nil, fmt.Errorf("take lock %s: %w", e.dir, err)
}

// resolveTake finds out whether a take whose reply was lost happened.
func (e *entry) resolveTake(ctx context.Context, rec string) (bool, *busyRun, error) {
	for {
		if err := e.c.Sync(ctx, e.dir); err != nil {
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			return false, nil, err
		}
		_, st, ok, err := readRun(ctx, e.c, e.dir)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if err != nil {
			return false, nil, err
		}
		if !ok || st.EphemeralOwner != e.c.SessionID() {
			return false, nil, nil
		}
		b, dst, err := e.c.Get(ctx, e.dir)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if err != nil {
			return false, nil, err
		}
		v := dst.Version
		if string(b) != "held "+path.Base(e.node) {
			v = -1
		}
		e.held(rec, v)
		return true, nil, nil
	}
}

func (e *entry) held(rec string, version int32) {
	e.prevRecord, e.heldVersion = rec, version
	e.mu.Lock()
	e.standingOK = true
	e.mu.Unlock()
}

func (e *entry) runInfo(stopping bool) RunInfo {
	hi := e.info
	hi.Since = e.heldSince
	return RunInfo{Node: path.Base(e.node), Token: e.czxid, HolderInfo: hi, Stopping: stopping}
}

// unclean reports whether the previous holder's session ended without
// releasing.
func (e *entry) unclean() bool {
	return strings.HasPrefix(e.prevRecord, "held ") && e.prevRecord != "held "+path.Base(e.node)
}

// mustWait is how long the new holder must still wait before its job may
// start because the previous holder's job may still run (interference
// seen, and no confirmation of its end).
func (e *entry) mustWait() (time.Duration, string) {
	s := e.suspect
	if s.owner == "" || e.prevRecord == "released "+s.owner {
		return 0, ""
	}
	return time.Until(s.until), s.why
}

// standingLoss is what happened to a holder's nodes.
type standingLoss struct {
	Node  string
	Event string // deleted, changed, or missing (already gone when checked)
	Zxid  int64  // of the change, as far as it could be read back
}

func (l standingLoss) String() string {
	return fmt.Sprintf("%s %s (zxid 0x%x)", l.Node, l.Event, l.Zxid)
}

// watchStanding watches the holder's queue node and run node until ctx
// ends; the first change by anyone else is sent on the returned channel.
// The watches outlive reconnects (the client re-arms them).
func (e *entry) watchStanding(ctx context.Context) <-chan standingLoss {
	me := e.c.SessionID()
	out, armed := watchNodes(ctx, e.c, []watchedNode{
		// Nothing writes a queue node after its create.
		{path: e.node, ok: func(st wire.Stat) bool { return st.Version == 0 }},
		{path: e.runPath(), ok: func(st wire.Stat) bool { return st.EphemeralOwner == me && st.Version == 0 }},
	})
	e.armed = armed
	mark := make(chan standingLoss, 1)
	go func() {
		select {
		case l := <-out:
			e.mu.Lock()
			e.standingOK = false
			e.mu.Unlock()
			mark <- l
		case <-ctx.Done():
		}
	}()
	return mark
}

// watchedNode is a node whose change by anyone else ends a hold; ok tells
// whether its stat is still as its holder left it.
type watchedNode struct {
	path string
	ok   func(wire.Stat) bool
}

// watchNodes arms an exists watch on every node and reports the first
// deletion or change (capacity 1), or nothing once ctx or the session ends.
// armed is closed once every watch is set (or setting them failed).
func watchNodes(ctx context.Context, c *client.Client, nodes []watchedNode) (losses <-chan standingLoss, armed <-chan struct{}) {
	out := make(chan standingLoss, 1)
	done := make(chan struct{})
	go func() {
		fired := make(chan standingLoss, len(nodes))
		for _, n := range nodes {
			st, ok, ch, err := existsW(ctx, c, n.path)
			switch {
			case err != nil:
				close(done)
				return // the session or ctx is over
			case !ok:
				close(done)
				out <- lossOf(ctx, c, n.path, "missing")
				return
			case !n.ok(st):
				close(done)
				out <- lossOf(ctx, c, n.path, "changed")
				return
			}
			go func() {
				select {
				case ev := <-ch:
					switch ev.Type {
					case wire.EventNodeDeleted:
						fired <- lossOf(ctx, c, n.path, "deleted")
					case wire.EventNodeDataChanged:
						fired <- lossOf(ctx, c, n.path, "changed")
					}
				case <-ctx.Done():
				}
			}()
		}
		close(done)
		select {
		case l := <-fired:
			out <- l
		case <-ctx.Done():
		}
	}()
	return out, done
}

func existsW(ctx context.Context, c *client.Client, p string) (wire.Stat, bool, <-chan client.Event, error) {
	for {
		st, ok, ch, err := c.ExistsW(ctx, p)
		if !errors.Is(err, client.ErrConnectionLoss) {
			return st, ok, ch, err
		}
	}
}

// lossOf reads back the zxid of what happened to node: its mzxid if it
// changed, its folder's pzxid (the last child change) if it went.
func lossOf(ctx context.Context, c *client.Client, node, event string) standingLoss {
	l := standingLoss{Node: node, Event: event}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if st, ok, err := c.Exists(rctx, node); err == nil && ok && event == "changed" {
		l.Zxid = st.Mzxid
		return l
	}
	// The nearest folder that still exists saw the deletion last (its
	// own deletion, when the whole lock folder went).
	for dir := path.Dir(node); dir != "/"; dir = path.Dir(dir) {
		if _, st, err := c.Children(rctx, dir); err == nil {
			l.Zxid = st.Pzxid
			break
		}
	}
	return l
}

// hold keeps the run node taken after someone else deleted it, so that
// nobody starts while our job is being stopped. Best effort: if another
// contender took it meanwhile, there is nothing to keep.
func (e *entry) hold(ctx context.Context, loss standingLoss) {
	if loss.Node != e.runPath() || loss.Event == "changed" {
		return
	}
	data, _ := json.Marshal(e.runInfo(true))
	_, err := e.c.Create(ctx, e.runPath(), data, wire.FlagEphemeral, e.acl)
	if err == nil {
		e.mu.Lock()
		e.runRemade = true
		e.mu.Unlock()
		return
	}
	e.log.Warn("could not take the run node back while stopping", "node", e.runPath(), "err", err)
}

// release gives up the entry's place. A holder whose standing is intact
// deletes its queue node and run node and records the clean release in one
// multi. A holder that lost its standing deletes only what is still its
// own, and records the release only if no one has recorded a hold since.
// A release whose reply is lost is retried until it is known to have
// happened, or the session or ctx ends.
func (e *entry) release(ctx context.Context, held bool) error {
	if e.node == "" {
		return nil
	}
	if !held {
		return e.retry(ctx, func() error {
			err := e.c.Delete(ctx, e.node, -1)
			if errors.Is(err, wire.ErrNoNode) {
				return nil
			}
			return err
		})
	}
	if e.armed != nil {
		select {
		case <-e.armed:
		case <-ctx.Done():
		}
	}
	e.mu.Lock()
	intact := e.standingOK && !e.runRemade
	e.mu.Unlock()
	me := path.Base(e.node)
	if intact {
		err := e.retry(ctx, func() error {
			_, err := e.c.Multi(ctx,
				wire.MultiOp{Type: wire.OpDelete, Path: e.node, Version: -1},
				wire.MultiOp{Type: wire.OpDelete, Path: e.runPath(), Version: -1},
				wire.MultiOp{Type: wire.OpSetData, Path: e.dir, Data: []byte("released " + me), Version: -1})
			return err
		})
		if err == nil || !errors.Is(err, wire.ErrNoNode) {
			return err
		}
		// Our queue node (or the run node) went: released already by a
		// retry whose first reply was lost, or deleted by someone. Fall
		// through and remove only what is still ours.
	}
	if e.heldVersion >= 0 {
		_ = e.retry(ctx, func() error {
			_, err := e.c.Set(ctx, e.dir, []byte("released "+me), e.heldVersion)
			if errors.Is(err, wire.ErrBadVersion) || errors.Is(err, wire.ErrNoNode) {
				return nil
			}
			return err
		})
	}
	if err := e.retry(ctx, func() error {
		_, st, ok, err := readRun(ctx, e.c, e.dir)
		if err != nil || !ok || st.EphemeralOwner != e.c.SessionID() {
			return err
		}
		err = e.c.Delete(ctx, e.runPath(), st.Version)
		if errors.Is(err, wire.ErrNoNode) || errors.Is(err, wire.ErrBadVersion) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	return e.retry(ctx, func() error {
		err := e.c.Delete(ctx, e.node, -1)
		if errors.Is(err, wire.ErrNoNode) {
			return nil
		}
		return err
	})
}

// retry runs op until it returns anything but a connection loss: the
// session moves to another member and the op goes out again.
func (e *entry) retry(ctx context.Context, op func() error) error {
	for {
		err := op()
		if !errors.Is(err, client.ErrConnectionLoss) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		select {
		case <-e.c.Done():
			return e.c.Err()
		default:
		}
	}
}
