package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/state"
)

// ErrNotAcquired is returned by TryAcquire when another contender holds
// the lock or is about to.
var ErrNotAcquired = errors.New("lock not acquired")

// Options configure a contender.
type Options struct {
	// ACL is set on every node the entry creates: its queue node, the run
	// node, and the lock's folders if they are missing. Nil:
	// client.OpenACL.
	ACL []wire.ACL
	// Log receives a warning whenever the entry sees interference. Nil:
	// discarded.
	Log *slog.Logger
}

// Entry is one contender's place in a lock's queue, and its hold.
//
// An Entry belongs to the goroutine that entered it and is not safe for
// concurrent use, except that Retake and the channel of WatchStanding may
// be used from other goroutines while the owner waits for its work. It
// does not own the client; Release must be called whatever Acquire
// returned, and before the client is closed if the release is to be
// recorded as clean.
type Entry struct {
	c    *client.Client
	dir  string
	id   string
	acl  []wire.ACL
	info Info
	log  *slog.Logger

	node  string // full path of our queue node, once created
	czxid int64  // its czxid: the fencing token

	lastHolder RunInfo         // the run node's data as last seen while waiting
	suspect    state.Suspicion // evidence of interference with the previous holder

	// Set once held.
	held        bool
	heldSince   time.Time
	prevRecord  string
	folderCzxid int64 // of the folder we took the lock in

	// armed is closed once the standing watches are set: a release waits
	// for it, so that they fire (at our own deletes) however short the
	// hold, and not at a later holder's nodes.
	armed <-chan struct{}

	// mu guards heldVersion, runRemade and standingOK: the standing
	// watch (standing.go) writes them from its goroutine while the owner
	// holds, and Release reads them.
	mu sync.Mutex
	// heldVersion is the folder's version after our last record ("held",
	// then "stopping"), -1 when unknown: a later record is written only
	// over our own.
	heldVersion int32

	runRemade  bool // the run node was deleted under us and created again
	standingOK bool // nobody touched our nodes while we held
}

// Enter joins the queue of the lock in dir, creating its folders if they
// are missing, and describes the contender with info.
func Enter(ctx context.Context, c *client.Client, dir string, info Info, o Options) (*Entry, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ACL == nil {
		o.ACL = client.OpenACL
	}
	e := &Entry{c: c, dir: dir, acl: o.ACL, info: info, log: o.Log}
	return e, e.join(ctx)
}

// Dir is the lock's folder.
func (e *Entry) Dir() string { return e.dir }

// Node is the full path of the entry's queue node ("" before it exists).
// It changes when the node was deleted by someone else and the entry
// joined the queue again.
func (e *Entry) Node() string { return e.node }

// Token is the queue node's czxid: the fencing token of this holder. It
// rises from one holder of the lock to the next.
func (e *Entry) Token() int64 { return e.czxid }

// join creates this contender's queue node (again, if it was deleted),
// named with a fresh id so that a create whose reply was lost is found
// (guardedCreate).
func (e *Entry) join(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	e.id, e.node, e.czxid = hex.EncodeToString(rnd[:]), "", 0
	data, _ := json.Marshal(e.info)
	g := guardedCreate{c: e.c, path: path.Join(e.dir, NodePrefix+e.id+"-"), data: data,
		flags: wire.FlagEphemeralSequential, acl: e.acl, ensure: true}
	node, st, err := g.create(ctx)
	if err != nil {
		return fmt.Errorf("join queue %s: %w", e.dir, err)
	}
	e.node, e.czxid = node, st.Czxid
	return nil
}

func (e *Entry) runPath() string { return path.Join(e.dir, RunNode) }

// Acquire blocks until this entry holds the lock: lowest in the queue and
// owner of the run node. onStatus, if set, is called whenever the
// position, the holder or its state changes. When Acquire returns nil,
// check MustWait and UncleanHandoff before starting the work.
func (e *Entry) Acquire(ctx context.Context, onStatus func(Status)) error {
	return e.acquire(ctx, false, onStatus)
}

// TryAcquire is Acquire that returns ErrNotAcquired as soon as another
// contender holds the lock or is ahead in the queue.
func (e *Entry) TryAcquire(ctx context.Context, onStatus func(Status)) error {
	return e.acquire(ctx, true, onStatus)
}

func (e *Entry) acquire(ctx context.Context, try bool, onStatus func(Status)) error {
	var last Status
	report := func(st Status) {
		if st != last && onStatus != nil {
			onStatus(st)
		}
		last = st
	}
	for {
		kids, rec, recVersion, recErr, err := e.listing(ctx)
		if err != nil {
			switch {
			case errors.Is(err, client.ErrConnectionLoss):
				continue
			case errors.Is(err, wire.ErrNoNode):
				// The whole folder went (deleteall), our node with it.
				if err := e.rejoin(ctx, evidenceFolderGone); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("list %s: %w", e.dir, err)
		}
		q := sortQueue(kids)
		pos := slices.Index(q, path.Base(e.node))
		switch {
		case pos < 0:
			if err := e.rejoin(ctx, evidenceOwnNodeGone); err != nil {
				return err
			}
		case pos > 0:
			if err := e.waitBehind(ctx, q, pos, rec, try, report); err != nil {
				return err
			}
		case recErr != nil && !errors.Is(recErr, client.ErrConnectionLoss):
			return fmt.Errorf("read %s: %w", e.dir, recErr)
		case recErr == nil:
			if held, err := e.atHead(ctx, q, string(rec), recVersion, try, report); held || err != nil {
				return err
			}
		}
	}
}

// listing reads the folder's children and, alongside, its record and
// the record's version: the record is needed only if we turn out lowest,
// and reading both at once keeps the handoff at one round trip before the
// take.
func (e *Entry) listing(ctx context.Context) (kids []string, rec []byte, recVersion int32, recErr, err error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var st wire.Stat
		rec, st, recErr = e.c.Get(ctx, e.dir)
		recVersion = st.Version
	}()
	kids, _, err = e.c.Children(ctx, e.dir)
	wg.Wait()
	return kids, rec, recVersion, recErr, err
}

// waitBehind is a waiter's turn at pos > 0 of queue q: report who holds,
// then wait until the predecessor goes (or, trying, give up).
func (e *Entry) waitBehind(ctx context.Context, q []string, pos int, rec []byte, try bool, report func(Status)) error {
	st, err := e.waiterStatus(ctx, q, pos, rec)
	if err != nil {
		if errors.Is(err, client.ErrConnectionLoss) {
			return nil
		}
		return err
	}
	report(st)
	if try {
		return ErrNotAcquired
	}
	return e.awaitGone(ctx, path.Join(e.dir, q[pos-1]))
}

// atHead is the turn of the queue's head, which found the folder's record
// rec at version recVersion: take the lock, or wait for a previous holder
// whose work may still go on (or, trying, give up). held reports the lock
// taken; neither held nor an error means look again.
func (e *Entry) atHead(ctx context.Context, q []string, rec string, recVersion int32, try bool, report func(Status)) (held bool, err error) {
	if x, ok := stoppingOf(rec); ok && e.suspect.Owner != x {
		// Its nodes may both be gone by now, as after a crash; its record
		// says otherwise. (Once only: a holder that died stopping must not
		// block the lock for ever.)
		var info Info
		if e.lastHolder.Node == x {
			info = e.lastHolder.HolderInfo
		}
		e.suspectHolder(x, info, evidenceStopping)
	}
	if s := e.suspect; s.Blocks(rec, time.Now()) {
		// The previous holder's work may still go on. Wait for it to
		// record its release (it does once its work is over, unless
		// someone took the lock since), or for its work to be over
		// whatever happened, before taking: taking would write the record
		// over.
		report(Status{Position: 0, Length: len(q), HolderNode: s.Owner, Holder: e.lastHolder.HolderInfo, Stopping: true})
		if try {
			return false, ErrNotAcquired
		}
		return false, e.awaitRecord(ctx, rec, s.Until)
	}
	ok, busy, err := e.take(ctx, rec, recVersion)
	if err != nil {
		return false, err
	}
	if ok {
		report(Status{Position: 0, Length: len(q), HolderNode: path.Base(e.node), Holder: e.runInfo(false).HolderInfo})
		return true, nil
	}
	if busy == nil {
		return false, nil // our node went, or the run node just did: look again
	}
	// The previous holder still runs; wait for its run node.
	if orphanedRun(busy.info.Node, q) {
		e.suspectHolder(busy.info.Node, busy.info.HolderInfo, evidenceRunOrphaned)
	}
	e.lastHolder = busy.info
	report(Status{Position: 0, Length: len(q), HolderNode: busy.info.Node, Holder: busy.info.HolderInfo, Stopping: true})
	if try {
		return false, ErrNotAcquired
	}
	return false, e.awaitEvent(ctx, busy.ch, nil)
}

func (e *Entry) suspectHolder(owner string, info Info, why string) {
	now := time.Now()
	s, fresh := e.suspect.Raise(owner, info, e.info, why, now)
	if fresh {
		e.log.Warn("lock nodes changed by another client; the previous holder's job may still run", "lock_dir", e.dir, "holder_node", owner, "evidence", why, "wait_at_most", s.Until.Sub(now).Round(time.Millisecond))
	}
	e.suspect = s
}

// rejoin puts the entry back at the end of the queue after its node was
// deleted while its session lived: someone else deleted it, so whoever
// held the lock may still be running.
func (e *Entry) rejoin(ctx context.Context, why string) error {
	select {
	case <-e.c.Done():
		return fmt.Errorf("queue node %s vanished: %w", e.node, e.c.Err())
	default:
	}
	holder := e.lastHolder
	if holder.Node == "" {
		holder.Node = state.UnknownOwner
	}
	e.suspectHolder(holder.Node, holder.HolderInfo, why)
	e.log.Warn("queue node deleted by another client; joining the queue again", "node", e.node, "reason", why)
	return e.join(ctx)
}

// waiterStatus reads who holds the lock, for a contender at pos > 0, and
// notes evidence of interference: the head queued while the folder says
// it holds, but without its run node.
func (e *Entry) waiterStatus(ctx context.Context, q []string, pos int, rec []byte) (Status, error) {
	st := Status{Position: pos, Length: len(q), HolderNode: q[0]}
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
	var hi Info
	_ = json.Unmarshal(b, &hi)
	if headWithoutRun(string(rec), q[0]) {
		e.suspectHolder(q[0], hi, evidenceHeadUnminded)
	}
	hi.Since = time.Time{} // not holding (yet)
	st.Holder = hi
	return st, nil
}

// awaitGone waits until node is deleted (or changed, or the watch ends).
func (e *Entry) awaitGone(ctx context.Context, node string) error {
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
	return e.awaitEvent(ctx, ch, nil)
}

// awaitEvent waits for an event on ch, or for timeout to fire (a nil
// timeout never fires). A connection loss counts as an event: the caller
// looks again.
func (e *Entry) awaitEvent(ctx context.Context, ch <-chan client.Event, timeout <-chan time.Time) error {
	select {
	case <-timeout:
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

// awaitRecord waits until the folder's record is no longer seen, or until
// passes.
func (e *Entry) awaitRecord(ctx context.Context, seen string, until time.Time) error {
	b, _, ch, err := e.c.GetW(ctx, e.dir)
	if err != nil {
		if errors.Is(err, client.ErrConnectionLoss) || errors.Is(err, wire.ErrNoNode) {
			return nil
		}
		return fmt.Errorf("watch %s: %w", e.dir, err)
	}
	if string(b) != seen {
		return nil // changed before the watch was set
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	return e.awaitEvent(ctx, ch, t.C)
}

// busyRun is a run node another contender holds, with a watch on it.
type busyRun struct {
	info RunInfo
	ch   <-chan client.Event
}

// take tries to become the holder: in one multi, check that our queue node
// still exists, create the run node, and record us as holder over the
// record rec the decision to take was made on (version recVersion). It
// returns ok once held; busy when another holds the run node (with a watch
// armed on it); neither when the state moved under us and the caller
// should look again.
func (e *Entry) take(ctx context.Context, rec string, recVersion int32) (ok bool, busy *busyRun, err error) {
	e.heldSince = time.Now().UTC().Truncate(time.Millisecond)
	data, _ := json.Marshal(e.runInfo(false))
	me := path.Base(e.node)
	res, err := e.c.Multi(ctx,
		wire.MultiOp{Type: wire.OpCheck, Path: e.node, Version: -1},
		wire.MultiOp{Type: wire.OpCreate, Path: e.runPath(), Data: data, ACL: e.acl, Flags: wire.FlagEphemeral},
		wire.MultiOp{Type: wire.OpSetData, Path: e.dir, Data: []byte(heldRecord(me)), Version: recVersion})
	if err == nil {
		e.markHeld(rec, res[2].Stat)
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
	case failed == 2 && errors.Is(err, wire.ErrBadVersion):
		return false, nil, nil // the record changed (a holder stopping, say): read it again
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
func (e *Entry) resolveTake(ctx context.Context, rec string) (bool, *busyRun, error) {
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
		if string(b) != heldRecord(path.Base(e.node)) {
			dst.Version = -1
		}
		e.markHeld(rec, dst)
		return true, nil, nil
	}
}

// markHeld notes the hold, with the folder's stat after our record
// (version -1: our record is not the last).
func (e *Entry) markHeld(rec string, folder wire.Stat) {
	e.held, e.prevRecord, e.folderCzxid = true, rec, folder.Czxid
	e.mu.Lock()
	e.heldVersion, e.standingOK = folder.Version, true
	e.mu.Unlock()
}

func (e *Entry) runInfo(stopping bool) RunInfo {
	hi := e.info
	hi.Since = e.heldSince
	return RunInfo{Node: path.Base(e.node), Token: e.czxid, HolderInfo: hi, Stopping: stopping}
}

// UncleanHandoff reports whether the previous holder's session ended
// without releasing (or someone deleted its nodes): the record it left
// still named it as holder.
func (e *Entry) UncleanHandoff() bool {
	return state.Unclean(e.prevRecord, path.Base(e.node))
}

// MustWait is how long the new holder must still wait before its work may
// start because the previous holder's work may still run (interference
// seen, and no confirmation of its end), and the evidence.
func (e *Entry) MustWait() (time.Duration, string) {
	return e.suspect.MustWait(e.prevRecord, time.Now())
}

// Release gives up the entry's place. A holder whose standing is intact
// deletes its queue node and run node and records the clean release in one
// multi. A holder that lost its standing deletes only what is still its
// own, and records the release only if no one has recorded a hold since. A
// waiter deletes its queue node. A release whose reply is lost is retried
// until it is known to have happened, or the session or ctx ends.
func (e *Entry) Release(ctx context.Context) error {
	if e.node == "" {
		return nil
	}
	if !e.held {
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
	intact, version := e.standingOK && !e.runRemade, e.heldVersion
	e.mu.Unlock()
	me := path.Base(e.node)
	if intact {
		err := e.retry(ctx, func() error {
			_, err := e.c.Multi(ctx,
				wire.MultiOp{Type: wire.OpDelete, Path: e.node, Version: -1},
				wire.MultiOp{Type: wire.OpDelete, Path: e.runPath(), Version: -1},
				wire.MultiOp{Type: wire.OpSetData, Path: e.dir, Data: []byte(releasedRecord(me)), Version: -1})
			return err
		})
		if err == nil || !errors.Is(err, wire.ErrNoNode) {
			return err
		}
		// Our queue node (or the run node) went: released already by a
		// retry whose first reply was lost, or deleted by someone. Fall
		// through and remove only what is still ours.
	}
	if version >= 0 {
		_ = e.retry(ctx, func() error {
			_, err := e.c.Set(ctx, e.dir, []byte(releasedRecord(me)), version)
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
func (e *Entry) retry(ctx context.Context, op func() error) error {
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
