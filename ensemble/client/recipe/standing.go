package recipe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/state"
)

// What happened to a watched node: the supervisor's words (state).
const (
	LossDeleted = state.LossDeleted
	LossChanged = state.LossChanged
	LossMissing = state.LossMissing
)

// Loss is what happened to a node whose holder did not expect it; its
// Revision is the zxid of the change.
type Loss = state.Loss

// Watched is a node whose change by anyone else ends a hold; OK tells
// whether its stat is still as its holder left it.
type Watched struct {
	Path string
	OK   func(wire.Stat) bool
}

// WatchNodes arms an exists watch on every node and reports the first
// deletion or change (the channel has capacity 1 and receives at most one
// Loss), or nothing once ctx or the session ends. armed is closed once
// every watch is set (or setting them failed). The watches outlive
// reconnects (the client re-arms them). A goroutine per node runs until
// its watch fires or ctx ends.
func WatchNodes(ctx context.Context, c *client.Client, nodes []Watched) (losses <-chan Loss, armed <-chan struct{}) {
	out := make(chan Loss, 1)
	done := make(chan struct{})
	go func() {
		fired := make(chan Loss, len(nodes))
		for _, n := range nodes {
			st, ok, ch, err := existsW(ctx, c, n.Path)
			switch {
			case err != nil:
				close(done)
				return // the session or ctx is over
			case !ok:
				close(done)
				out <- lossOf(ctx, c, n.Path, LossMissing)
				return
			case !n.OK(st):
				close(done)
				out <- lossOf(ctx, c, n.Path, LossChanged)
				return
			}
			go func() {
				select {
				case ev := <-ch:
					switch ev.Type {
					case wire.EventNodeDeleted:
						fired <- lossOf(ctx, c, n.Path, LossDeleted)
					case wire.EventNodeDataChanged:
						fired <- lossOf(ctx, c, n.Path, LossChanged)
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
func lossOf(ctx context.Context, c *client.Client, node, event string) Loss {
	l := Loss{Node: node, Event: event}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if st, ok, err := c.Exists(rctx, node); err == nil && ok && event == LossChanged {
		l.Revision = st.Mzxid
		return l
	}
	// The nearest folder that still exists saw the deletion last (its
	// own deletion, when the whole lock folder went).
	for dir := path.Dir(node); dir != "/"; dir = path.Dir(dir) {
		if _, st, err := c.Children(rctx, dir); err == nil {
			l.Revision = st.Pzxid
			break
		}
	}
	return l
}

// WatchStanding watches the holder's queue node and run node until ctx
// ends; the first change by anyone else is sent on the returned channel,
// once the folder's record says that this holder is stopping (see
// recordStopping). Call it once, after Acquire; Release then waits for
// the watches to be set. The channel may be read from any goroutine.
func (e *Entry) WatchStanding(ctx context.Context) <-chan Loss {
	me := e.c.SessionID()
	out, armed := WatchNodes(ctx, e.c, []Watched{
		// Nothing writes a queue node after its create.
		{Path: e.node, OK: func(st wire.Stat) bool { return st.Version == 0 }},
		{Path: e.runPath(), OK: func(st wire.Stat) bool { return st.EphemeralOwner == me && st.Version == 0 }},
	})
	e.armed = armed
	mark := make(chan Loss, 1)
	go func() {
		select {
		case l := <-out:
			e.recordStopping(ctx)
			e.mu.Lock()
			e.standingOK = false
			e.mu.Unlock()
			mark <- l
		case <-ctx.Done():
		}
	}()
	return mark
}

// recordStopping records in the folder that this holder lost its standing
// and is stopping, unless someone recorded a hold since. The record
// outlives both of the holder's nodes: a successor that takes the lock
// only after the interferer deleted the other one too (which looks like
// the holder's crash) still finds it and waits. When the whole folder
// went, the holder puts it back with the record, so that a newcomer with
// no memory of the holder waits too. It is written before the loss is
// reported, so before the holder's work hears of it: an interferer that
// deletes the second node once the work reacted to the first cannot get
// ahead of it. Best effort, within a quarter of the session timeout.
func (e *Entry) recordStopping(ctx context.Context) {
	e.mu.Lock()
	v := e.heldVersion
	e.mu.Unlock()
	if v < 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, e.c.SessionTimeout()/4)
	defer cancel()
	if v, ok := e.writeStopping(wctx, []byte(stoppingRecord(path.Base(e.node))), v); ok {
		e.mu.Lock()
		e.heldVersion = v
		e.mu.Unlock()
	}
}

// writeStopping writes rec over the folder's record at version v, or into
// the folder made again if it went, and returns the record's new version.
func (e *Entry) writeStopping(ctx context.Context, rec []byte, v int32) (int32, bool) {
	for range 4 { // a folder deleted and made again by others a few times: give up
		st, err := e.c.Set(ctx, e.dir, rec, v)
		switch {
		case err == nil:
			return st.Version, true
		case errors.Is(err, client.ErrConnectionLoss):
			return e.readBack(ctx, rec)
		case errors.Is(err, wire.ErrBadVersion):
			// Someone recorded a hold since; or the folder went and a
			// contender made it again.
			var ok bool
			if v, ok = e.remade(ctx); !ok {
				return 0, false
			}
			continue
		case !errors.Is(err, wire.ErrNoNode):
			return 0, false // no answer
		}
		_, st, err = e.c.Create2(ctx, e.dir, rec, 0, e.acl)
		switch {
		case err == nil:
			return st.Version, true
		case errors.Is(err, client.ErrConnectionLoss):
			return e.readBack(ctx, rec)
		case errors.Is(err, wire.ErrNoNode):
			if EnsurePath(ctx, e.c, path.Dir(e.dir), e.acl) != nil {
				return 0, false
			}
		case errors.Is(err, wire.ErrNodeExists):
			var ok bool
			if v, ok = e.remade(ctx); !ok {
				return 0, false
			}
		default:
			return 0, false
		}
	}
	return 0, false
}

// remade returns the version of the folder's record if the folder is not
// the one this entry took the lock in but one made again since, which
// records no holder yet: the stopping record may go there.
func (e *Entry) remade(ctx context.Context) (int32, bool) {
	b, st, err := e.c.Get(ctx, e.dir)
	return st.Version, err == nil && st.Czxid != e.folderCzxid && len(b) == 0
}

// readBack finds out whether a write of rec whose reply was lost happened.
func (e *Entry) readBack(ctx context.Context, rec []byte) (int32, bool) {
	if err := e.c.Sync(ctx, e.dir); err != nil {
		return 0, false
	}
	b, st, err := e.c.Get(ctx, e.dir)
	return st.Version, err == nil && bytes.Equal(b, rec)
}

// Retake keeps the run node taken after someone else deleted it, so that
// nobody starts while the holder's work is being stopped; the new run
// node says Stopping. Best effort: if another contender took it
// meanwhile, there is nothing to keep. It may be called from any
// goroutine while the owner waits for its work to stop.
func (e *Entry) Retake(ctx context.Context, loss Loss) {
	if loss.Node != e.runPath() || loss.Event == LossChanged {
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
