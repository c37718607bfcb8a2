package statuspage

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

// The supervisor's locks, read from the tree. The layout is the lock
// recipe's (ensemble/client/recipe): a folder per lock under the lock
// root, its data the record of the last holder ("held NODE", "stopping
// NODE", "released NODE"), an ephemeral sequential queue node
// "lock-<id>-<seq>" per contender holding its description (JSON), and the
// ephemeral "run" node of the holder. The records' types are
// supervisor/state's, as every reader's.

// LocksView is every lock under the lock root.
type LocksView struct {
	Root  string     `json:"root"`
	Locks []LockView `json:"locks"`
	Error string     `json:"error,omitempty"`
}

// LockView is one lock: its holder, its queue in order, and what looks
// wrong with it.
type LockView struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Error is why the lock could not be read (its ACL, say).
	Error  string `json:"error,omitempty"`
	Record string `json:"record,omitempty"`
	// Free, with no holder, says what Record tells of the last one
	// (state.FreeLock).
	Free   string     `json:"free,omitempty"`
	Holder *Contender `json:"holder,omitempty"`
	// Waiting are the contenders after the holder (or all of them, with
	// no holder), in queue order: the first is next. Queued counts the
	// queue's nodes, the holder's among them; only the first 100 are
	// read.
	Waiting []Contender `json:"waiting"`
	Queued  int         `json:"queued"`
	// Lingering says why the holder's node is still there though its
	// owner seems gone; "" when nothing looks wrong.
	Lingering string `json:"lingering,omitempty"`
	// History is the holders this member saw, newest first, only in the
	// answer for one lock.
	History []PastHolder `json:"history,omitempty"`
}

// Contender is one node in a lock's queue, or the holder.
type Contender struct {
	Node    string    `json:"node"`
	Token   int64     `json:"token"` // the node's czxid, the fencing token
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	Since   time.Time `json:"since,omitzero"` // the holder: took the lock; a waiter: joined the queue
	Session string    `json:"session"`        // owner session id, hex
	// Stopping: the holder lost its standing and keeps the run node
	// only until its job is gone.
	Stopping bool `json:"stopping,omitempty"`
}

// PastHolder is a holder this member saw.
type PastHolder struct {
	Node  string    `json:"node"`
	Token int64     `json:"token"`
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since,omitzero"`
	// Gone is when this member first saw another holder, or none; zero
	// while it holds.
	Gone time.Time `json:"gone,omitzero"`
	// Record: the entry comes from the folder's record alone (the last
	// holder, which this member did not see hold).
	Record string `json:"record,omitempty"`
}

// maxLocks bounds the locks one view lists; a root with more is cut off
// with an error saying so. maxQueue bounds the contenders read of each:
// the reads happen while writes wait.
const (
	maxLocks = 500
	maxQueue = 100
)

// lockRaw is what one lock's read collects inside the tree view; it is
// decoded outside it.
type lockRaw struct {
	name, dir string
	err       error
	record    []byte
	queue     []rawNode // in queue order, the first maxQueue
	queued    int       // queue nodes in all
	run       *rawNode
}

type rawNode struct {
	name  string
	data  []byte
	stat  Stat
	owner bool // its ephemeral owner's session is live
}

// readLocks collects the locks under root, or just the one named only,
// reading folders' names through f.
func readLocks(t Tree, f folders, root, only string) ([]lockRaw, error) {
	var names []string
	var err error
	if only != "" {
		if _, err := t.Exists(path.Join(root, only)); err != nil {
			return nil, err
		}
		names = []string{only}
	} else {
		kids, st, err0 := f.first(t, root, maxLocks, byName)
		if err0 != nil {
			return nil, err0
		}
		names = kids
		if int(st.NumChildren) > len(kids) {
			err = fmt.Errorf("%d locks; showing the first %d", st.NumChildren, len(kids))
		}
	}
	out := make([]lockRaw, 0, len(names))
	for _, name := range names {
		out = append(out, readLock(t, f, root, name))
	}
	return out, err
}

func readLock(t Tree, f folders, root, name string) lockRaw {
	r := lockRaw{name: name, dir: path.Join(root, name)}
	rec, _, err := t.Get(r.dir)
	if err != nil {
		r.err = err
		return r
	}
	r.record = rec
	// One more than shown, to tell a full queue from a cut one; names
	// that are not queue nodes ("run") come last.
	kids, st, err := f.first(t, r.dir, maxQueue+1, byQueue)
	if err != nil {
		r.err = err
		return r
	}
	read := func(k string) (rawNode, bool) {
		data, st, err := t.Get(path.Join(r.dir, k))
		if err != nil {
			return rawNode{}, false
		}
		return rawNode{name: k, data: data, stat: st, owner: st.EphemeralOwner != 0 && t.SessionLive(st.EphemeralOwner)}, true
	}
	queue := kids
	for len(queue) > 0 && state.QueueSeq(queue[len(queue)-1]) < 0 {
		queue = queue[:len(queue)-1]
	}
	if n, ok := read(state.RunNode); ok {
		r.run = &n
	}
	r.queued = len(queue)
	if len(queue) == len(kids) && len(kids) > maxQueue {
		// Cut off before any other name: every child is a queue node
		// but the run node, or so the count assumes.
		r.queued = int(st.NumChildren)
		if r.run != nil {
			r.queued--
		}
	}
	if len(queue) > maxQueue {
		queue = queue[:maxQueue]
	}
	for _, k := range queue {
		if n, ok := read(k); ok {
			r.queue = append(r.queue, n)
		}
	}
	return r
}

// queueOrder orders a lock folder's children as its queue: by sequence
// number (then name, for a total order), names that are not queue nodes
// last.
func queueOrder(a, b string) int {
	sa, sb := state.QueueSeq(a), state.QueueSeq(b)
	switch {
	case sa < 0 && sb >= 0:
		return 1
	case sb < 0 && sa >= 0:
		return -1
	}
	if c := cmp.Compare(sa, sb); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// lockView decodes a lock read by readLock; session tells of the
// holder's session's liveness.
func lockView(r lockRaw, session func(int64) SessionState) LockView {
	v := LockView{Name: r.name, Path: r.dir, Waiting: []Contender{}}
	if r.err != nil {
		v.Error = nodeError(r.err)
		return v
	}
	v.Record, v.Queued = string(r.record), r.queued
	var run state.RunInfo
	if r.run != nil {
		_ = json.Unmarshal(r.run.data, &run)
	}
	var holderNode *rawNode
	for i, n := range r.queue {
		c := contenderOf(n)
		if r.run != nil && run.Node == n.name {
			c.Since, c.Stopping = run.Since, run.Stopping
			v.Holder = &c
			holderNode = &r.queue[i]
			continue
		}
		v.Waiting = append(v.Waiting, c)
	}
	switch {
	case r.run != nil && v.Holder == nil:
		// The holder's queue node is gone but its run node stays: it
		// is stopping its job, or someone deleted its queue node.
		c := Contender{Node: run.Node, Token: run.Token, Host: run.Host, PID: run.PID, User: run.User, Command: run.Command,
			Since: run.Since, Session: sessionHex(r.run.stat.EphemeralOwner), Stopping: true}
		v.Holder = &c
		holderNode = r.run
		v.Lingering = state.LingeringQueueGone
	case r.run != nil:
		holderNode = r.run
	}
	if holderNode != nil && v.Lingering == "" {
		v.Lingering = lingering(*holderNode, session)
	}
	if v.Holder == nil {
		v.Free = state.FreeLock(v.Record)
	}
	return v
}

func contenderOf(n rawNode) Contender {
	var info state.HolderInfo
	_ = json.Unmarshal(n.data, &info)
	return Contender{Node: n.name, Token: n.stat.Czxid, Host: info.Host, PID: info.PID, User: info.User,
		Command: info.Command, Since: info.Since, Session: sessionHex(n.stat.EphemeralOwner)}
}

// lingering is state.Lingering of a holder's node n, with what this
// member knows of its owner: in the tree, and (on the leader) how long
// its session has been silent.
func lingering(n rawNode, session func(int64) SessionState) string {
	l := state.Liveness{Persistent: n.stat.EphemeralOwner == 0, Gone: !n.owner}
	if st := session(n.stat.EphemeralOwner); !l.Persistent && st.Tracked {
		l.Silence = &state.Silence{Silent: st.Silent, Timeout: st.Timeout}
	}
	return state.Lingering(l)
}

func sessionHex(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("0x%x", uint64(id))
}

// nodeError says why a node could not be shown.
func nodeError(err error) string {
	switch {
	case errors.Is(err, ErrNoAuth):
		return "not readable: its ACL grants an unauthenticated client no read"
	case errors.Is(err, ErrNoNode):
		return "no such node"
	}
	return err.Error()
}
