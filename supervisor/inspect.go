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
	Info  HolderInfo `json:"info"`
}

// LockState is a lock's holder and its waiters, in queue order.
type LockState struct {
	Name    string      `json:"name"`
	Holder  *Contender  `json:"holder"`
	Waiters []Contender `json:"waiters"`
	// LastRelease is the folder's record of the last holder: "held NODE"
	// or "released NODE".
	LastRecord string `json:"last_record,omitempty"`
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
		dir := path.Join(root, name)
		rec, _, err := c.Get(ctx, dir)
		if errors.Is(err, wire.ErrNoNode) {
			out = append(out, LockState{Name: name})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		kids, _, err := c.Children(ctx, dir)
		if err != nil && !errors.Is(err, wire.ErrNoNode) {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		ls := LockState{Name: name, LastRecord: string(rec), Waiters: []Contender{}}
		for i, k := range sortQueue(kids) {
			data, st, err := c.Get(ctx, path.Join(dir, k))
			if errors.Is(err, wire.ErrNoNode) {
				continue // left the queue while we looked
			}
			if err != nil {
				return nil, err
			}
			ct := Contender{Node: path.Join(dir, k), Token: st.Czxid}
			_ = json.Unmarshal(data, &ct.Info)
			if i == 0 {
				ls.Holder = &ct
			} else {
				ls.Waiters = append(ls.Waiters, ct)
			}
		}
		out = append(out, ls)
	}
	return out, nil
}
