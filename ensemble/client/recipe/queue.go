package recipe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The lock's names and records have their home in supervisor/state, where
// every reader of a lock finds them.
const (
	// NodePrefix starts every queue node's name: "lock-<id>-<seq>".
	NodePrefix = state.LockNodePrefix
	// RunNode is the name of the holder's run node.
	RunNode = state.RunNode
)

const (
	recordHeld     = state.RecordHeld
	recordStopping = state.RecordStopping
)

func heldRecord(node string) string     { return recordHeld + node }
func stoppingRecord(node string) string { return state.RecordStopping + node }
func releasedRecord(node string) string { return state.RecordReleased + node }

// stoppingOf returns the holder a record says is stopping after it lost
// its standing.
func stoppingOf(record string) (node string, ok bool) {
	return strings.CutPrefix(record, recordStopping)
}

// Info is the data of a contender's queue node.
type Info = state.HolderInfo

// RunInfo is the data of the run node: the holder and since when it holds.
type RunInfo = state.RunInfo

// Status is a contender's view of the queue while it waits.
type Status struct {
	Position int // 0: next to hold, or holding
	Length   int
	// Holder is of the run node's owner; Since is when it took the lock.
	Holder     Info
	HolderNode string
	// Stopping: the previous holder still runs its work although it left
	// the queue (position 0 waits for it).
	Stopping bool
}

// seqOf returns the sequence number of a queue node name, or -1. Queue
// nodes of older supervisors carry no id, so none is required.
func seqOf(name string) int64 { return state.QueueSeq(name) }

// sortQueue orders queue node names by sequence number, dropping names
// that are not queue nodes (the run node among them).
func sortQueue(kids []string) []string { return sortSequential(kids, seqOf) }

// sequenceOf returns the sequence number the server appended to a node
// name made from prefix (and, withID, an id and a dash after it), or -1
// for a name not made so.
func sequenceOf(name, prefix string, withID bool) int64 {
	i := strings.LastIndexByte(name, '-')
	if !strings.HasPrefix(name, prefix) || i < 0 || withID && i < len(prefix) {
		return -1
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// sortSequential orders the names seq accepts by their sequence number,
// dropping the others.
func sortSequential(kids []string, seq func(string) int64) []string {
	out := make([]string, 0, len(kids))
	for _, k := range kids {
		if seq(k) >= 0 {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out
}

// readRun reads the run node of the lock in dir; ok is false when there
// is none.
func readRun(ctx context.Context, c *client.Client, dir string) (RunInfo, wire.Stat, bool, error) {
	b, st, err := c.Get(ctx, path.Join(dir, RunNode))
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

// Contender is one node in a lock's queue.
type Contender = state.Contender

// Queue is a lock as a reader sees it.
type Queue struct {
	// Record is the folder's record of the last holder: "held NODE" or
	// "released NODE".
	Record string
	// Contenders in queue order: the first holds the lock or is next to.
	Contenders []Contender
	// Stopping is a previous holder that left the queue (its node was
	// deleted) but still owns the run node while it stops its work.
	Stopping *RunInfo
	// ACL is the folder's, nil if it could not be read.
	ACL []wire.ACL
}

// List reads the lock in dir. The reads are not one snapshot: a
// contender that leaves meanwhile is left out. When there is no such lock
// the error satisfies errors.Is(err, wire.ErrNoNode).
func List(ctx context.Context, c *client.Client, dir string) (Queue, error) {
	rec, _, err := c.Get(ctx, dir)
	if errors.Is(err, wire.ErrNoNode) {
		return Queue{}, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err != nil {
		return Queue{}, fmt.Errorf("read %s: %w", dir, err)
	}
	q := Queue{Record: string(rec), Contenders: []Contender{}}
	if acl, _, err := c.GetACL(ctx, dir); err == nil {
		q.ACL = acl
	}
	kids, _, err := c.Children(ctx, dir)
	if err != nil && !errors.Is(err, wire.ErrNoNode) {
		return Queue{}, fmt.Errorf("list %s: %w", dir, err)
	}
	run, _, hasRun, err := readRun(ctx, c, dir)
	if err != nil {
		return Queue{}, err
	}
	runQueued := false
	for _, k := range sortQueue(kids) {
		data, st, err := c.Get(ctx, path.Join(dir, k))
		if errors.Is(err, wire.ErrNoNode) {
			continue // left the queue while we looked
		}
		if err != nil {
			return Queue{}, err
		}
		ct := Contender{Node: path.Join(dir, k), Token: st.Czxid}
		_ = json.Unmarshal(data, &ct.Info)
		if hasRun && run.Node == k {
			runQueued = true
			ct.Holding = true
			ct.Info.Since = run.Since
		}
		q.Contenders = append(q.Contenders, ct)
	}
	if hasRun && !runQueued {
		q.Stopping = &run
	}
	return q, nil
}

// lingering is state.Lingering of a holder's entry owned by session
// owner, with the leader's view of the session where the server can give
// it. A failed read of it is not the listing's failure: the holder is
// shown as it would be without.
func lingering(ctx context.Context, c *client.Client, owner int64) string {
	l := state.Liveness{Persistent: owner == 0}
	if !l.Persistent {
		if silent, timeout, ok, err := c.Silence(ctx, owner); err == nil && ok {
			l.Silence = &state.Silence{Silent: silent, Timeout: timeout}
		}
	}
	return state.Lingering(l)
}

// HolderLingering is the verdict (state.Lingering) on the holder of the
// lock in dir, "" when there is none or nothing looks wrong: what a
// waiter shows while it waits.
func HolderLingering(ctx context.Context, c *client.Client, dir string) (string, error) {
	run, _, ok, err := readRun(ctx, c, dir)
	if err != nil || !ok || run.Node == "" {
		return "", err
	}
	st, ok, err := c.Exists(ctx, path.Join(dir, run.Node))
	if err != nil || !ok {
		return "", err
	}
	return lingering(ctx, c, st.EphemeralOwner), nil
}
