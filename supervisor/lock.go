package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The lock recipe. Every contender creates an ephemeral sequential node
// in the lock's folder; the lowest sequence number holds the lock. Each
// waiter watches only its immediate predecessor, so a release wakes
// exactly one waiter (no herd), and it re-checks the queue after every
// wake-up: the predecessor may have left the queue without the lock ever
// having been free.
//
// A node's name carries a random id chosen before the create,
// "lock-<id>-<seq>". When a create's reply is lost with the connection,
// the contender finds its own node by that id after reconnecting instead
// of creating a second one (a ghost that would hold the lock forever for
// a session that thinks it is still waiting).
//
// The folder's data records the last holder: "held <node>" once a holder
// starts its job, "released <node>" when it let go cleanly (in the same
// multi that deletes its node). A new holder that finds "held" naming
// another node knows the previous holder's session ended instead, which
// is when --lock-delay applies.

const nodePrefix = "lock-"

// HolderInfo is the data of a contender's node: who is waiting or holding.
type HolderInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// QueueStatus is a contender's view of the queue.
type QueueStatus struct {
	Position   int // 0 holds the lock
	Length     int
	Holder     HolderInfo
	HolderNode string
}

// ErrNotAcquired: the lock was not had (--try, or --timeout expired).
var ErrNotAcquired = errors.New("lock not acquired")

// entry is one contender's place in a lock's queue.
//
// Not safe for concurrent use.
type entry struct {
	c     *client.Client
	dir   string
	id    string
	node  string // full path, once created
	czxid int64
}

// ensurePath creates every missing persistent component of p.
func ensurePath(ctx context.Context, c *client.Client, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := c.Create(ctx, cur, nil, 0, client.OpenACL)
		if err != nil && !errors.Is(err, wire.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// enter joins the queue of the lock in dir.
func enter(ctx context.Context, c *client.Client, dir string, info HolderInfo) (*entry, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	e := &entry{c: c, dir: dir, id: hex.EncodeToString(rnd[:])}
	data, _ := json.Marshal(info)
	for {
		p, st, err := c.Create2(ctx, path.Join(dir, nodePrefix+e.id+"-"), data, wire.FlagEphemeralSequential, client.OpenACL)
		if err == nil {
			e.node, e.czxid = p, st.Czxid
			return e, nil
		}
		if errors.Is(err, wire.ErrNoNode) {
			// First use of this lock: create its folders, then retry.
			// (Creating them up front would cost writes on every run.)
			if err := ensurePath(ctx, c, dir); err != nil {
				return nil, err
			}
			continue
		}
		if !errors.Is(err, client.ErrConnectionLoss) {
			return nil, fmt.Errorf("join queue %s: %w", dir, err)
		}
		// The create may or may not have happened: look for our id.
		found, err := e.find(ctx)
		if err != nil {
			return nil, err
		}
		if found {
			return e, nil
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
// that are not queue nodes.
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

// wait blocks until this entry holds the lock. With try set it returns
// ErrNotAcquired at once if another holds it. onStatus is called whenever
// the position or the holder changes.
func (e *entry) wait(ctx context.Context, try bool, onStatus func(QueueStatus)) error {
	var last QueueStatus
	for {
		kids, _, err := e.c.Children(ctx, e.dir)
		if err != nil {
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			return fmt.Errorf("list %s: %w", e.dir, err)
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
			// Our node is gone: only a session end deletes it.
			return fmt.Errorf("queue node %s vanished: %w", e.node, client.ErrSessionExpired)
		}
		st := QueueStatus{Position: pos, Length: len(q), HolderNode: q[0]}
		if pos > 0 {
			if b, _, err := e.c.Get(ctx, path.Join(e.dir, q[0])); err == nil {
				_ = json.Unmarshal(b, &st.Holder)
			}
		}
		if st.Position != last.Position || st.HolderNode != last.HolderNode || st.Length != last.Length {
			if onStatus != nil {
				onStatus(st)
			}
			last = st
		}
		if pos == 0 {
			return nil
		}
		if try {
			return ErrNotAcquired
		}
		pred := path.Join(e.dir, q[pos-1])
		_, ok, ch, err := e.c.ExistsW(ctx, pred)
		if err != nil {
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			return fmt.Errorf("watch %s: %w", pred, err)
		}
		if !ok {
			continue
		}
		select {
		case ev := <-ch:
			if ev.Err != nil && !errors.Is(ev.Err, client.ErrConnectionLoss) {
				return ev.Err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-e.c.Done():
			return e.c.Err()
		}
	}
}

// markHeld records this entry as the holder in the folder's data and
// reports whether the previous holder ended without releasing.
func (e *entry) markHeld(ctx context.Context) (unclean bool, err error) {
	prev, _, err := e.c.Get(ctx, e.dir)
	if err != nil {
		return false, err
	}
	unclean = strings.HasPrefix(string(prev), "held ") && string(prev) != "held "+path.Base(e.node)
	_, err = e.c.Set(ctx, e.dir, []byte("held "+path.Base(e.node)), -1)
	return unclean, err
}

// release deletes the entry's node; as holder it also records the clean
// release, atomically with the delete.
func (e *entry) release(ctx context.Context, held bool) error {
	var err error
	if held {
		_, err = e.c.Multi(ctx,
			wire.MultiOp{Type: wire.OpDelete, Path: e.node, Version: -1},
			wire.MultiOp{Type: wire.OpSetData, Path: e.dir, Data: []byte("released " + path.Base(e.node)), Version: -1})
	} else {
		err = e.c.Delete(ctx, e.node, -1)
	}
	if errors.Is(err, wire.ErrNoNode) {
		return nil
	}
	return err
}
