package etcdengine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The lock on etcd, under the lock's folder <dir>:
//
//	<dir>              the folder's record: "held X", "stopping X", "released X"
//	<dir>/lock-<l>-<n> a queue entry, attached to lease l (HolderInfo)
//	<dir>/run          the holder's run record, attached to its lease (RunInfo)
//
// The queue is ordered by create revision; the fencing token is the
// entry's create revision. Taking the lock is one transaction: the entry
// is still there, nobody has the run record, and the folder's record is
// the one the decision was made on.

// snapshot is a lock's folder as one read saw it.
type snapshot struct {
	rev     int64 // the read's revision: watches start after it
	folder  bool  // the folder's key exists
	record  string
	recRev  int64 // the record's mod revision (0: no key)
	entries []*mvccpb.KeyValue
	run     *mvccpb.KeyValue
}

func (s snapshot) names() []string {
	var q []string
	for _, kv := range s.entries {
		q = append(q, path.Base(string(kv.Key)))
	}
	return q
}

func (s snapshot) runInfo() state.RunInfo {
	var ri state.RunInfo
	if s.run != nil {
		_ = json.Unmarshal(s.run.Value, &ri)
	}
	return ri
}

func runKey(dir string) string { return path.Join(dir, state.RunNode) }

// read takes a snapshot of the lock in dir in one transaction.
func (c *Conn) read(ctx context.Context, dir string) (snapshot, error) {
	resp, err := c.cli.Txn(ctx).Then(clientv3.OpGet(dir), clientv3.OpGet(dir+"/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return snapshot{}, opErr("read lock", dir, err)
	}
	s := snapshot{rev: resp.Header.Revision}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		s.folder, s.record, s.recRev = true, string(kvs[0].Value), kvs[0].ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		name, ok := childName(dir+"/", string(kv.Key))
		switch {
		case !ok:
		case name == state.RunNode:
			s.run = kv
		case strings.HasPrefix(name, state.LockNodePrefix):
			s.entries = append(s.entries, kv)
		}
	}
	slices.SortFunc(s.entries, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	return s, nil
}

// entry is an engine.Entry on etcd.
type entry struct {
	c    *Conn
	dir  string
	info state.HolderInfo

	node string // full path of our entry, once created
	rev  int64  // its create revision: the token

	lastHolder state.RunInfo // the run record as last seen while waiting
	suspect    state.Suspicion
	obs        leaseObs // the lease of the contender waited on, as last asked
	gone       string   // the entry whose lease's end was judged: judged once
	// obsSeen is set once obs was first filled in (tests wait for it).
	obsSeen atomic.Bool
	tried   string // the record a take whose reply was lost was made on

	// Set once held.
	held       bool
	heldSince  time.Time
	prevRecord string
	runRev     int64 // create revision of our run record

	mu sync.Mutex // guards recRev, runRemade, standingOK, releasing
	// recRev is the folder record's mod revision after our last record
	// ("held", then "stopping"), 0 when unknown: a later record is
	// written only over our own.
	recRev     int64
	runRemade  bool // the run record was deleted under us and made again
	standingOK bool // nobody touched our keys while we held
	releasing  bool // our own deletes are under way: not a loss
}

// Enter joins the queue of the lock in dir.
func (c *Conn) Enter(ctx context.Context, dir string, info state.HolderInfo) (engine.Entry, error) {
	if _, err := c.key(dir); err != nil {
		return nil, err
	}
	e := &entry{c: c, dir: dir, info: info}
	return e, e.join(ctx)
}

func (e *entry) Dir() string  { return e.dir }
func (e *entry) Node() string { return e.node }
func (e *entry) Token() int64 { return e.rev }

// join creates the entry (again, if it was deleted), and the lock's
// folders if they are missing, in one transaction. A lost reply is
// resolved by reading the entry's key: its name is this attempt's own.
func (e *entry) join(ctx context.Context) error {
	e.node, e.rev = "", 0
	node := path.Join(e.dir, entryName(e.c.lease, e.c.seq.Add(1)))
	data, _ := json.Marshal(e.info)
	var ops []clientv3.Op
	for d := e.dir; !e.c.implicit(d); d = path.Dir(d) {
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(d), "=", 0)}, []clientv3.Op{clientv3.OpPut(d, "")}, nil))
	}
	ops = append(ops, clientv3.OpPut(node, string(data), clientv3.WithLease(e.c.lease)))
	for {
		resp, err := e.c.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil {
			e.node, e.rev = node, resp.Header.Revision
			return nil
		}
		if err := e.settle(ctx, err); err != nil {
			return fmt.Errorf("join queue %s: %w", e.dir, err)
		}
		g, gerr := e.c.cli.Get(ctx, node)
		if gerr == nil && len(g.Kvs) > 0 {
			e.node, e.rev = node, g.Kvs[0].CreateRevision
			return nil
		}
	}
}

// settle decides whether a failed request may be tried again: nil when
// the store merely did not answer, else the error to return.
func (e *entry) settle(ctx context.Context, err error) error {
	select {
	case <-e.c.done:
		return e.c.sessionErr()
	default:
	}
	if ctx.Err() != nil || !isUnavailable(err) {
		return mapErr(err)
	}
	t := time.NewTimer(50 * time.Millisecond) // a new leader is being elected
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.c.done:
		return e.c.sessionErr()
	}
}

// sessionErr is why the session ended, as ErrSessionLost.
func (c *Conn) sessionErr() error {
	if err := c.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: session closed", engine.ErrSessionLost)
}

func (e *entry) Acquire(ctx context.Context, onStatus func(engine.Status)) error {
	return e.acquire(ctx, false, onStatus)
}

func (e *entry) TryAcquire(ctx context.Context, onStatus func(engine.Status)) error {
	return e.acquire(ctx, true, onStatus)
}

func (e *entry) acquire(ctx context.Context, try bool, onStatus func(engine.Status)) error {
	var last engine.Status
	report := func(st engine.Status) {
		if st != last && onStatus != nil {
			onStatus(st)
		}
		last = st
	}
	for {
		s, err := e.c.read(ctx, e.dir)
		if err != nil {
			if err := e.settle(ctx, err); err != nil {
				return err
			}
			continue
		}
		q := s.names()
		pos := slices.Index(q, path.Base(e.node))
		switch {
		case pos < 0:
			why := evidenceOwnEntryGone
			if !s.folder {
				why = evidenceFolderGone
			}
			if err := e.rejoin(ctx, why); err != nil {
				return err
			}
		case pos > 0:
			st := e.waiterStatus(s, q, pos)
			report(st)
			if try {
				return engine.ErrNotAcquired
			}
			var poll <-chan time.Time
			if pos == 1 {
				poll = e.watchLease(ctx, q[0])
			}
			if err := e.awaitDeleted(ctx, string(s.entries[pos-1].Key), s.rev, poll); err != nil {
				return err
			}
		default:
			held, err := e.atHead(ctx, s, q, try, report)
			if held || err != nil {
				return err
			}
		}
	}
}

func (e *entry) waiterStatus(s snapshot, q []string, pos int) engine.Status {
	st := engine.Status{Position: pos, Length: len(q), HolderNode: q[0]}
	if s.run != nil {
		ri := s.runInfo()
		e.lastHolder = ri
		st.Holder, st.HolderNode, st.Stopping = ri.HolderInfo, ri.Node, ri.Stopping
		return st
	}
	var hi state.HolderInfo
	_ = json.Unmarshal(s.entries[0].Value, &hi)
	hi.Since = time.Time{} // not holding (yet)
	st.Holder = hi
	return st
}

// atHead is the turn of the queue's head: take the lock, or wait for a
// previous holder whose work may still go on. held reports the lock
// taken; neither held nor an error means look again.
func (e *entry) atHead(ctx context.Context, s snapshot, q []string, try bool, report func(engine.Status)) (held bool, err error) {
	me := path.Base(e.node)
	if s.run != nil {
		ri := s.runInfo()
		if s.run.Lease == int64(e.c.lease) && ri.Node == me {
			e.markHeld(e.tried, s.recRev, s.run.CreateRevision) // a take whose reply was lost
			return true, nil
		}
		// The previous holder still runs: wait for its run record.
		if !slices.Contains(q, ri.Node) {
			e.suspectHolder(ri.Node, ri.HolderInfo, evidenceRunOrphaned)
		}
		e.lastHolder = ri
		report(engine.Status{Position: 0, Length: len(q), HolderNode: ri.Node, Holder: ri.HolderInfo, Stopping: true})
		if try {
			return false, engine.ErrNotAcquired
		}
		return false, e.awaitDeleted(ctx, runKey(e.dir), s.rev, e.watchLease(ctx, ri.Node))
	}
	if x, ok := recordOwner(s.record); ok && x != me {
		// Its keys are gone and its record says it did not release: its
		// session ended (its lease is gone), or someone deleted its keys.
		if err := e.judge(ctx, x, s.record); err != nil {
			return false, err
		}
	}
	if e.suspect.Blocks(s.record, time.Now()) {
		report(engine.Status{Position: 0, Length: len(q), HolderNode: e.suspect.Owner, Holder: e.lastHolder.HolderInfo, Stopping: true})
		if try {
			return false, engine.ErrNotAcquired
		}
		return false, e.awaitRecord(ctx, s, e.recheck())
	}
	return e.take(ctx, s, q, report)
}

// judge weighs a previous holder x whose keys are gone while the record
// names it: if its lease lives, someone else deleted its keys (or it is
// stopping) and its work may still run; if its lease is gone, afterLease
// says how long its work may still run.
func (e *entry) judge(ctx context.Context, x, record string) error {
	lease, ok := entryLease(x)
	if !ok || e.gone == x {
		return nil
	}
	info := e.holderInfo(x)
	alive, err := e.observe(ctx, x, lease)
	if err != nil {
		return e.settle(ctx, err) // asked again on the next turn
	}
	stopping := strings.HasPrefix(record, state.RecordStopping)
	if alive {
		why := evidenceKeysGone
		if stopping {
			why = evidenceStopping
		}
		e.suspectHolder(x, info, why)
		return nil
	}
	before := e.suspect
	e.gone = x
	e.suspect = afterLease(e.suspect, e.obs, x, info, e.info, stopping, time.Now())
	if e.suspect != before && e.suspect.Owner != before.Owner {
		e.c.log.Warn("the previous holder's lease ended early; its job may still run",
			"lock_dir", e.dir, "holder_node", x, "evidence", e.suspect.Why, "wait_at_most", time.Until(e.suspect.Until).Round(time.Millisecond))
	}
	return nil
}

// observe asks whether owner's lease lives, and remembers how long it
// has left if it does.
func (e *entry) observe(ctx context.Context, owner string, lease clientv3.LeaseID) (bool, error) {
	sent := time.Now()
	resp, err := e.c.cli.TimeToLive(ctx, lease)
	if err != nil {
		return false, err
	}
	if resp.TTL < 0 { // -1: gone; 0: under a second left, rounded down
		return false, nil
	}
	e.obs = leaseObs{owner: owner, sent: sent, recv: time.Now(), left: time.Duration(resp.TTL) * time.Second}
	e.obsSeen.Store(true)
	return true, nil
}

// watchLease observes the lease of owner, the contender this entry waits
// on, and returns when to ask again (nil: never, the name carries none).
func (e *entry) watchLease(ctx context.Context, owner string) <-chan time.Time {
	lease, ok := entryLease(owner)
	if !ok {
		return nil
	}
	if alive, err := e.observe(ctx, owner, lease); err != nil || !alive {
		return nil // the next turn sees why
	}
	return time.After(time.Until(e.obs.pollAt(e.c.ttl / 3)))
}

// holderInfo is what this entry knows of entry x's settings.
func (e *entry) holderInfo(x string) state.HolderInfo {
	if e.lastHolder.Node == x {
		return e.lastHolder.HolderInfo
	}
	return state.HolderInfo{}
}

// recheck is when a head blocked by a suspicion looks again: at its end,
// or when the suspected holder's lease is next due to be asked about.
func (e *entry) recheck() time.Time {
	until := e.suspect.Until
	if e.obs.owner == e.suspect.Owner && e.gone != e.suspect.Owner {
		if t := e.obs.pollAt(e.c.ttl / 3); t.Before(until) {
			until = t
		}
	}
	return until
}

func (e *entry) suspectHolder(owner string, info state.HolderInfo, why string) {
	now := time.Now()
	s, fresh := e.suspect.Raise(owner, info, e.info, why, now)
	if fresh {
		e.c.log.Warn("lock keys changed by another client; the previous holder's job may still run",
			"lock_dir", e.dir, "holder_node", owner, "evidence", why, "wait_at_most", s.Until.Sub(now).Round(time.Millisecond))
	}
	e.suspect = s
}

// rejoin puts the entry back at the end of the queue after its key was
// deleted while its session lived: someone else deleted it, so whoever
// held the lock may still be running.
func (e *entry) rejoin(ctx context.Context, why string) error {
	if err := e.c.aliveOrLost(ctx); err != nil {
		return fmt.Errorf("queue entry %s vanished: %w", e.node, err)
	}
	holder := e.lastHolder
	if holder.Node == "" {
		holder.Node = state.UnknownOwner
	}
	e.suspectHolder(holder.Node, holder.HolderInfo, why)
	e.c.log.Warn("queue entry deleted by another client; joining the queue again", "node", e.node, "reason", why)
	return e.join(ctx)
}

// take tries to become the holder in one transaction over snapshot s.
func (e *entry) take(ctx context.Context, s snapshot, q []string, report func(engine.Status)) (bool, error) {
	e.heldSince = time.Now().UTC().Truncate(time.Millisecond)
	me := path.Base(e.node)
	data, _ := json.Marshal(e.runInfo(false))
	e.tried = s.record
	resp, err := e.c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(e.node), "=", e.rev),
		clientv3.Compare(clientv3.CreateRevision(runKey(e.dir)), "=", 0),
		clientv3.Compare(clientv3.ModRevision(e.dir), "=", s.recRev),
	).Then(
		clientv3.OpPut(runKey(e.dir), string(data), clientv3.WithLease(e.c.lease)),
		clientv3.OpPut(e.dir, state.RecordHeld+me),
	).Commit()
	if err != nil {
		// The take may have happened: the next snapshot shows our run
		// record if it did.
		return false, e.settle(ctx, err)
	}
	if !resp.Succeeded {
		return false, nil // the queue moved under us: look again
	}
	e.markHeld(s.record, resp.Header.Revision, resp.Header.Revision)
	report(engine.Status{Position: 0, Length: len(q), HolderNode: me, Holder: e.runInfo(false).HolderInfo})
	return true, nil
}

func (e *entry) markHeld(prev string, recRev, runRev int64) {
	e.held, e.prevRecord, e.runRev = true, prev, runRev
	e.mu.Lock()
	e.recRev, e.standingOK = recRev, true
	e.mu.Unlock()
}

func (e *entry) runInfo(stopping bool) state.RunInfo {
	hi := e.info
	hi.Since = e.heldSince
	return state.RunInfo{Node: path.Base(e.node), Token: e.rev, HolderInfo: hi, Stopping: stopping}
}

func (e *entry) UncleanHandoff() bool { return state.Unclean(e.prevRecord, path.Base(e.node)) }

func (e *entry) MustWait() (time.Duration, string) {
	return e.suspect.MustWait(e.prevRecord, time.Now())
}

// awaitDeleted waits until key is deleted after revision rev, or timeout
// fires (nil: never), or the watch breaks: the caller looks again.
func (e *entry) awaitDeleted(ctx context.Context, key string, rev int64, timeout <-chan time.Time) error {
	ch := e.c.watchOnce(ctx, key, "", rev+1, func(ev *clientv3.Event) (engine.Event, bool) {
		return engine.Event{Kind: engine.Deleted, Path: key}, ev.Type == clientv3.EventTypeDelete
	}, engine.Event{Kind: engine.Deleted, Path: key})
	return e.await(ctx, ch, timeout)
}

// awaitRecord waits until the folder's record changes after snapshot s,
// or until passes.
func (e *entry) awaitRecord(ctx context.Context, s snapshot, until time.Time) error {
	ch := e.c.watchOnce(ctx, e.dir, "", s.rev+1, func(*clientv3.Event) (engine.Event, bool) {
		return engine.Event{Kind: engine.Changed, Path: e.dir}, true
	}, engine.Event{Kind: engine.Changed, Path: e.dir})
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	return e.await(ctx, ch, t.C)
}

func (e *entry) await(ctx context.Context, ch <-chan engine.Event, timeout <-chan time.Time) error {
	select {
	case <-ch:
		return nil
	case <-timeout:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.c.done:
		return e.c.sessionErr()
	}
}

// aliveOrLost asks the store whether the session's lease still lives,
// and ends the session if it does not.
func (c *Conn) aliveOrLost(ctx context.Context) error {
	resp, err := c.cli.TimeToLive(ctx, c.lease)
	if err == nil && resp.TTL < 0 {
		c.end(fmt.Errorf("%w: etcd lease %s expired or was revoked", engine.ErrSessionLost, c.ID()))
	}
	select {
	case <-c.done:
		return c.sessionErr()
	default:
		return nil
	}
}

// errNoLock: List found neither the folder nor an entry.
var errNoLock = errors.New("no such lock")

// List reads the lock in dir as a reader sees it, from one snapshot.
func (c *Conn) List(ctx context.Context, dir string) (engine.Queue, error) {
	if _, err := c.key(dir); err != nil {
		return engine.Queue{}, err
	}
	s, err := c.read(ctx, dir)
	if err != nil {
		return engine.Queue{}, err
	}
	if !s.folder && len(s.entries) == 0 && s.run == nil {
		return engine.Queue{}, fmt.Errorf("%s: %w: %w", dir, engine.ErrNotFound, errNoLock)
	}
	q := engine.Queue{Record: s.record}
	ri := s.runInfo()
	names := s.names()
	for i, kv := range s.entries {
		var hi state.HolderInfo
		_ = json.Unmarshal(kv.Value, &hi)
		// The full path, as the ZooKeeper engine lists it: status shows
		// it, and a reader can name the entry by it.
		ct := state.Contender{Node: path.Join(dir, names[i]), Token: kv.CreateRevision, Info: hi}
		if s.run != nil && ri.Node == names[i] {
			ct.Holding, ct.Info = true, ri.HolderInfo
		}
		q.Contenders = append(q.Contenders, ct)
	}
	if s.run != nil && !slices.Contains(names, ri.Node) {
		q.Stopping = &ri
	}
	return q, nil
}

// lingering is state.Lingering of a holder's entry under lease: etcd
// tells how much of the lease's TTL is left, and a holder renews it every
// third of it, so what has run down is how long etcd has not heard from
// the holder. A failed ask is not the listing's failure.
func (c *Conn) lingering(ctx context.Context, lease clientv3.LeaseID) string {
	l := state.Liveness{Persistent: lease == 0}
	if !l.Persistent {
		resp, err := c.cli.TimeToLive(ctx, lease)
		switch {
		case err != nil:
		case resp.TTL < 0:
			l.Gone = true
		default:
			granted := time.Duration(resp.GrantedTTL) * time.Second
			l.Silence = &state.Silence{Silent: granted - time.Duration(resp.TTL)*time.Second, Timeout: granted}
		}
	}
	return state.Lingering(l)
}

// HolderLingering is the verdict on the holder of the lock in dir, from
// its entry's lease.
func (c *Conn) HolderLingering(ctx context.Context, dir string) (string, error) {
	s, err := c.read(ctx, dir)
	if err != nil || s.run == nil {
		return "", err
	}
	ri := s.runInfo()
	for i, name := range s.names() {
		if name == ri.Node {
			return c.lingering(ctx, clientv3.LeaseID(s.entries[i].Lease)), nil
		}
	}
	return "", nil
}
