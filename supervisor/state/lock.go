package state

import (
	"strconv"
	"strings"
	"time"
)

// Names in a lock's folder.
const (
	// LockNodePrefix starts every queue entry's name: "lock-<id>-<seq>".
	LockNodePrefix = "lock-"
	// RunNode is the name of the holder's run record.
	RunNode = "run"
)

// The lock folder's own record names its last holder: "held NODE",
// "stopping NODE" or "released NODE", NODE a queue entry's base name.
const (
	RecordHeld     = "held "
	RecordStopping = "stopping "
	RecordReleased = "released "
)

// FreeLock says, for people, what the record of a lock nobody holds tells
// of its last holder, without the queue entry's internal name.
func FreeLock(record string) string {
	switch {
	case record == "":
		return "never held"
	case strings.HasPrefix(record, RecordReleased):
		return "released by its last holder"
	case strings.HasPrefix(record, RecordStopping):
		return "its last holder was stopping when it went"
	case strings.HasPrefix(record, RecordHeld):
		return "its last holder went without releasing it"
	}
	return "record: " + record
}

// HolderInfo is the record of a contender's queue entry: who is waiting
// or holding, for people reading the queue, and how long its work can
// outlive its standing, for its successor.
type HolderInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
	// SessionTimeoutMS and KillGraceMS bound how long the contender's work
	// can outlive its standing: its lease, then the time it takes to stop.
	// A successor that suspects interference waits that long.
	SessionTimeoutMS int64 `json:"session_timeout_ms,omitempty"`
	KillGraceMS      int64 `json:"kill_grace_ms,omitempty"`
	// Holders is how many contenders may hold at once (a semaphore, see
	// engine.EnterSemaphore); 0 or 1 is a lock. Every contender of one
	// name must say the same.
	Holders int `json:"holders,omitempty"`
}

// HolderCount is the Holders a record means: a record without the
// field is a lock's.
func (i HolderInfo) HolderCount() int { return max(i.Holders, 1) }

// KillSlack is added to a contender's own bound: the kill of its work
// must land and the processes be reaped.
const KillSlack = 100 * time.Millisecond

// Outlives is how long after it loses its standing a contender's work may
// still go on: until its lease runs out, then its kill grace.
func (i HolderInfo) Outlives() time.Duration {
	return time.Duration(i.SessionTimeoutMS+i.KillGraceMS)*time.Millisecond + KillSlack
}

// RunInfo is the run record: the holder and since when it holds.
type RunInfo struct {
	Node  string `json:"node"` // the holder's queue entry, its base name
	Token int64  `json:"token"`
	HolderInfo
	// Stopping: the holder lost its standing and keeps the run record
	// only until its work is over.
	Stopping bool `json:"stopping,omitempty"`
}

// Contender is one entry in a lock's queue as a reader sees it.
type Contender struct {
	Node  string     `json:"node"`
	Token int64      `json:"token"` // the entry's creation revision: the fencing token it holds with
	Info  HolderInfo `json:"info"`  // for the holder, Since is when it took the lock
	// Holding: this contender owns the run record (for the queue's head:
	// it holds the lock, rather than being about to take it).
	Holding bool `json:"holding,omitempty"`
	// Lingering, for a holder, says why its entry may outlive it
	// (Lingering's verdict); "" when nothing looks wrong or the store
	// cannot tell.
	Lingering string `json:"lingering,omitempty"`
}

// QueueSeq is the sequence number the store appended to a queue entry's
// name ("lock-<id>-<seq>"), or -1 for a name that is not a queue entry
// (the run record among them). Entries of older supervisors carry no id.
func QueueSeq(name string) int64 {
	i := strings.LastIndexByte(name, '-')
	if !strings.HasPrefix(name, LockNodePrefix) || i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// What happened to a record whose holder watched it, in the words every
// engine and reader uses.
const (
	LossDeleted = "deleted"
	LossChanged = "changed"
	// LossMissing: the record was already gone when its watch was set.
	LossMissing = "missing"
)

// Loss is what happened to a record whose holder did not expect it: a
// foreign delete or change of its queue entry or run record.
type Loss struct {
	Node     string
	Event    string // LossDeleted, LossChanged or LossMissing
	Revision int64  // the store's revision of the change (ZooKeeper: a zxid), as far as it could be read back
}

func (l Loss) String() string {
	return l.Node + " " + l.Event + " (revision " + strconv.FormatInt(l.Revision, 10) + ")"
}
