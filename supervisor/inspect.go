package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Contender is one node in a lock's queue.
type Contender struct {
	Node  string     `json:"node"`
	Token int64      `json:"token"` // the node's czxid: the fencing token it runs with
	Info  HolderInfo `json:"info"`  // for the holder, Since is when it took the lock
	// Holding: this contender owns the run node (for the queue's head:
	// it holds the lock, rather than being about to take it).
	Holding bool `json:"holding,omitempty"`
}

// LockState is a lock's holder and its waiters, in queue order.
type LockState struct {
	Name    string      `json:"name"`
	Holder  *Contender  `json:"holder"` // the queue's head
	Waiters []Contender `json:"waiters"`
	// LastRecord is the folder's record of the last holder: "held NODE"
	// or "released NODE".
	LastRecord string `json:"last_record,omitempty"`
	// Stopping is a previous holder that left the queue (its node was
	// deleted) but still owns the run node while it stops its job.
	Stopping *RunInfo `json:"stopping,omitempty"`
	// ACL is the lock folder's; Open when any client may delete or change
	// its nodes.
	ACL  string `json:"acl,omitempty"`
	Open bool   `json:"open,omitempty"`
}

// Inspect reads the state of the named locks under root, or of every lock
// when names is empty.
func Inspect(ctx context.Context, c *client.Client, root string, names []string) ([]LockState, error) {
	if len(names) == 0 {
		kids, _, err := c.Children(ctx, root)
		if errors.Is(err, wire.ErrNoNode) {
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

func inspectLock(ctx context.Context, c *client.Client, root, name string) (LockState, error) {
	dir := path.Join(root, name)
	rec, _, err := c.Get(ctx, dir)
	if errors.Is(err, wire.ErrNoNode) {
		return LockState{Name: name}, nil
	}
	if err != nil {
		return LockState{}, fmt.Errorf("read %s: %w", dir, err)
	}
	ls := LockState{Name: name, LastRecord: string(rec), Waiters: []Contender{}}
	if acl, _, err := c.GetACL(ctx, dir); err == nil {
		ls.ACL, ls.Open = FormatACL(acl), OpenToAll(acl)
	}
	kids, _, err := c.Children(ctx, dir)
	if err != nil && !errors.Is(err, wire.ErrNoNode) {
		return LockState{}, fmt.Errorf("list %s: %w", dir, err)
	}
	run, _, hasRun, err := readRun(ctx, c, dir)
	if err != nil {
		return LockState{}, err
	}
	runQueued := false
	for i, k := range sortQueue(kids) {
		data, st, err := c.Get(ctx, path.Join(dir, k))
		if errors.Is(err, wire.ErrNoNode) {
			continue // left the queue while we looked
		}
		if err != nil {
			return LockState{}, err
		}
		ct := Contender{Node: path.Join(dir, k), Token: st.Czxid}
		_ = json.Unmarshal(data, &ct.Info)
		if hasRun && run.Node == k {
			runQueued = true
			ct.Holding = true
			ct.Info.Since = run.Since
		}
		if i == 0 {
			ls.Holder = &ct
		} else {
			ls.Waiters = append(ls.Waiters, ct)
		}
	}
	if hasRun && !runQueued {
		ls.Stopping = &run
	}
	return ls, nil
}
