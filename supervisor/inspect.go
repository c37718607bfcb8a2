package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// LockState is a lock's holder and its waiters, in queue order, as
// `coordrun status` shows them.
type LockState struct {
	Name    string            `json:"name"`
	Holder  *state.Contender  `json:"holder"` // the queue's head
	Waiters []state.Contender `json:"waiters"`
	// LastRecord is the folder's record of the last holder: "held NODE"
	// or "released NODE".
	LastRecord string `json:"last_record,omitempty"`
	// Stopping is a previous holder that left the queue (its node was
	// deleted) but still owns the run node while it stops its job.
	Stopping *state.RunInfo `json:"stopping,omitempty"`
	// ACL is the lock folder's; Open when any client may delete or change
	// its nodes.
	ACL  string `json:"acl,omitempty"`
	Open bool   `json:"open,omitempty"`
	// Unreadable: the lock's ACL does not let this session read it (its
	// supervisors ran with credentials other than this session's, and no
	// --acl granting read); nothing else is known of it.
	Unreadable bool `json:"unreadable,omitempty"`
	// A semaphore's (run --holders N): MaxHolders is its N, Holders every
	// slot's holder (Holder is the first of them), Waiters its queue.
	MaxHolders int               `json:"max_holders,omitempty"`
	Holders    []state.Contender `json:"holders,omitempty"`
	// Lingering is the first holder's verdict (state.Lingering) that
	// looks wrong, as the status page's lock has it; "" when none does.
	Lingering string `json:"lingering,omitempty"`
}

// Inspect reads the state of the named locks under root, or of every lock
// when names is empty.
func Inspect(ctx context.Context, c engine.Conn, root string, names []string) ([]LockState, error) {
	if len(names) == 0 {
		kids, err := c.Children(ctx, root)
		if errors.Is(err, engine.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", root, err)
		}
		sort.Strings(kids)
		names = kids
	}
	out := make([]LockState, 0, len(names))
	for _, name := range names {
		ls, err := inspectLock(ctx, c, root, name)
		if err != nil {
			return nil, err
		}
		out = append(out, ls)
	}
	return out, nil
}

func inspectLock(ctx context.Context, c engine.Conn, root, name string) (LockState, error) {
	q, err := c.List(ctx, path.Join(root, name))
	if errors.Is(err, engine.ErrNotFound) {
		return LockState{Name: name}, nil // a lock never taken is free
	}
	if errors.Is(err, engine.ErrNoAuth) {
		// One lock kept from this session must not hide the others.
		return LockState{Name: name, Unreadable: true}, nil
	}
	if err != nil {
		return LockState{}, fmt.Errorf("lock %s: %w", name, err)
	}
	ls := LockState{Name: name, LastRecord: q.Record, Waiters: []state.Contender{}, Stopping: q.Stopping}
	ls.ACL, ls.Open = q.Access, q.Open
	if len(q.Contenders) > 0 {
		ls.Holder = &q.Contenders[0]
		ls.Waiters = append(ls.Waiters, q.Contenders[1:]...)
		if w, ok := c.(engine.HolderWatcher); ok && ls.Holder.Holding {
			// A verdict that cannot be had leaves the holder as read.
			ls.Holder.Lingering, _ = w.HolderLingering(ctx, path.Join(root, name))
			ls.Lingering = ls.Holder.Lingering
		}
		return ls, nil
	}
	sq, ok, err := engine.ListSemaphore(ctx, c, path.Join(root, name))
	if err != nil {
		return LockState{}, fmt.Errorf("lock %s: %w", name, err)
	}
	if ok {
		ls.MaxHolders, ls.Holders = sq.Holders, sq.Holding
		ls.Waiters = append(ls.Waiters, sq.Waiting...)
		if len(sq.Holding) > 0 {
			ls.Holder = &ls.Holders[0]
		}
		for _, h := range sq.Holding {
			if h.Lingering != "" && ls.Lingering == "" {
				ls.Lingering = h.Lingering
			}
		}
		if len(sq.Stopping) > 0 {
			ls.Stopping = &sq.Stopping[0]
		}
	}
	return ls, nil
}
