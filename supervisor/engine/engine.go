// Package engine is the seam between the supervisor and the coordination
// store it runs on. The supervisor (coordrun run, coordrun cron, coordrun
// status and the cron commands) reaches the store only through these
// interfaces; an engine implements them for one kind of store: the
// ZooKeeper protocol (a coordrun ensemble, Apache ZooKeeper) or etcd.
//
// The seam is narrow on purpose: a session whose lease the supervisor can
// prove, the lock queue, and versioned records in folders. Everything the
// supervisor decides from them lives above the seam; everything a store
// needs to keep the promises stated here lives below it.
//
// # Paths
//
// Records are named by slash-separated absolute paths ("/coordrun/locks/
// backup"); a folder is a record that has children. Every engine keeps the
// same tree, so that a reader can name what a writer made: a child's name
// is the last path element, Children lists names, not paths.
//
// # Errors
//
// An engine maps its own failures onto the error vocabulary below so that
// errors.Is(err, ErrX) holds; it keeps its own error in the chain (wrap
// both) for messages. Any other error is a refusal the caller cannot
// recover from by retrying (a malformed path, a record too large).
//
// # Conformance
//
// supervisor/engine/enginetest checks an engine against a real store:
// an engine's tests call enginetest.Run with a way to open sessions.
package engine

import (
	"context"
	"errors"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

// The error vocabulary every engine maps to.
var (
	// ErrExists: a create found the record already there.
	ErrExists = errors.New("record exists")
	// ErrVersion: a conditional update or delete found the record changed
	// since the version it was given was read.
	ErrVersion = errors.New("record changed since it was read")
	// ErrNotFound: the record (or, for a create, its folder) is not there.
	ErrNotFound = errors.New("no such record")
	// ErrNoAuth: the store refused the session access to the record.
	ErrNoAuth = errors.New("not authorized")
	// ErrSessionLost: the session has ended (expired, closed, or its
	// lease revoked); everything ephemeral it made is gone or going. A
	// new session is needed.
	ErrSessionLost = errors.New("session lost")
	// ErrUnreachable: no member of the store answered in time, or the
	// connection broke before the reply. The session may still live. A
	// write that returns it may or may not have happened: read back
	// before writing again (Claim and the lock queue do so themselves).
	ErrUnreachable = errors.New("no ensemble member reachable")
	// ErrNotAcquired: TryAcquire found the lock held by another
	// contender, or about to be.
	ErrNotAcquired = errors.New("lock not acquired")
)

// Version is the precondition of a conditional write: the version of a
// record as read (ZooKeeper: the stat's version; etcd: the key's
// mod_revision). Only equality is meaningful; the supervisor never does
// arithmetic on it.
type Version int64

// AnyVersion makes Update and Delete unconditional.
const AnyVersion Version = -1

// Stat is what a read or a write tells about a record.
type Stat struct {
	// Version is to be passed to Update or Delete to write only over
	// this state of the record.
	Version Version
	// Created is the store's revision at the record's creation (ZooKeeper:
	// czxid; etcd: create_revision). It is unique in the store and greater
	// than that of every record created before it: a recreated record has
	// a greater Created than the one it replaces.
	Created int64
	// Modified is the store's revision at the record's last change
	// (ZooKeeper: mzxid; etcd: mod_revision).
	Modified int64
}

// Mode is how long a created record lives and how it is named.
type Mode int

const (
	// Persistent records live until deleted.
	Persistent Mode = iota
	// Ephemeral records are deleted by the store when the session that
	// created them ends (and can be deleted before, like any record).
	Ephemeral
	// Sequential records are persistent, and the store appends to the
	// given name a decimal number of ten digits, zero-padded, greater
	// than any it appended before in the same folder: sorting the names
	// sorts them by creation.
	Sequential
)

// EventKind is what a watch saw.
type EventKind int

const (
	// Changed: the record's data changed (a Get watch).
	Changed EventKind = iota + 1
	// Deleted: the record was deleted (a Get watch).
	Deleted
	// ChildrenChanged: a child was created or deleted (a Children watch).
	ChildrenChanged
)

// Event is what fired a one-shot watch.
type Event struct {
	Kind EventKind
	Path string
}

// Conn is a connected session with everything the supervisor does through
// it. It is safe for concurrent use: a cron host's firings share one.
type Conn interface {
	Session
	Store
	Locks
}

// Session is the supervisor's standing at the store: the lease it can
// prove, and the end of it.
//
// The lease proof is what lets a job run only while its holder stands: a
// session's ephemeral records (its queue entries, its run record) live
// until the session ends, and the store ends a session no sooner than its
// timeout after it last heard from the client. So when a request is
// acknowledged, the session is proven to live until the request's send
// time (taken by the client before sending) plus the negotiated timeout:
// the store heard from it no earlier than it was sent. Lease is the
// latest such deadline; the supervisor takes a margin off it and kills the
// job at what remains.
type Session interface {
	// ID names the session in logs and records (ZooKeeper: the session
	// id in hex; etcd: the lease id).
	ID() string
	// Kind names the store for messages and for the lease margin:
	// "coordrun", "zookeeper" or "etcd".
	Kind() string
	// Timeout is the session timeout the store granted, which may be
	// below the one asked for.
	Timeout() time.Duration
	// Lease is the proven lease deadline: the send time of the newest
	// request the store acknowledged, plus Timeout. It only rises while
	// the session lives, and never passes the store's own expiry of the
	// session. Zero before the first acknowledgement.
	Lease() time.Time
	// LeaseUpdates delivers each new Lease. The channel has capacity 1
	// and keeps only the newest deadline; it has a single reader.
	LeaseUpdates() <-chan time.Time
	// Done is closed when the session has ended, for whatever reason.
	Done() <-chan struct{}
	// Err says why Done is closed: an error satisfying
	// errors.Is(err, ErrSessionLost), or nil after Close.
	Err() error
	// Close ends the session: the store deletes its ephemeral records.
	Close() error
}

// Store is versioned records in folders. Every record created through it
// carries the session's access rule (the engine's configuration says
// which); folders are created with the same rule.
type Store interface {
	// Create makes the record at path and returns its name as made (with
	// the number appended, for Sequential). ErrExists if it is there,
	// ErrNotFound if its folder is not.
	Create(ctx context.Context, path string, data []byte, mode Mode) (string, Stat, error)
	// EnsureFolder creates path and its missing ancestors as empty
	// persistent records; those already there are left as they are.
	EnsureFolder(ctx context.Context, path string) error
	// Claim creates the persistent record at path if it is absent, and
	// reports whether this call made it, with the version it was made
	// at (the precondition of the claimant's next Update). Unlike Create,
	// it resolves a lost reply itself: it reads back the record and asks
	// mine whether the data found is what this call wrote. Creating its
	// folder is the caller's part (ErrNotFound).
	Claim(ctx context.Context, path string, data []byte, mine func(data []byte) bool) (won bool, v Version, err error)
	// Get reads a record.
	Get(ctx context.Context, path string) ([]byte, Stat, error)
	// GetW reads a record and sets a one-shot watch on it: the channel
	// receives one Event (Changed or Deleted) at the record's next change
	// after the read, then nothing more. It receives nothing if ctx or
	// the session ends first.
	GetW(ctx context.Context, path string) ([]byte, Stat, <-chan Event, error)
	// Update replaces a record's data if its version is still v (ErrVersion
	// if not; AnyVersion: whatever it is).
	Update(ctx context.Context, path string, data []byte, v Version) (Stat, error)
	// Delete removes a record if its version is still v (ErrVersion if
	// not; AnyVersion: whatever it is). A folder must be empty.
	Delete(ctx context.Context, path string, v Version) error
	// Children lists the names of a folder's children, in no order.
	Children(ctx context.Context, path string) ([]string, error)
	// ChildrenW lists them and sets a one-shot watch: the channel receives
	// one Event (ChildrenChanged) when a child is next created or
	// deleted, or the folder itself deleted, then nothing more. It
	// receives nothing if ctx or the session ends first.
	ChildrenW(ctx context.Context, path string) ([]string, <-chan Event, error)
}

// Locks is the lock queue: a lock is a folder; contenders enter it as
// ephemeral entries in creation order ("lock-<id>-<seq>", state.
// LockNodePrefix), and the lowest entry holds the lock. The holder also
// keeps an ephemeral run record (state.RunNode, a state.RunInfo) and the
// folder's own record names the last holder (state.RecordHeld and the
// others), so that a successor can tell a clean handoff from one whose
// holder's session died or whose entries someone else deleted.
type Locks interface {
	// Enter joins the queue of the lock in dir, creating its folders if
	// they are missing; info is the entry's record. The entry is made
	// once even if a reply is lost. Release must be called whatever the
	// Entry's Acquire returns.
	Enter(ctx context.Context, dir string, info state.HolderInfo) (Entry, error)
	// List reads the lock in dir as a reader sees it. The reads are not
	// one snapshot: an entry that leaves meanwhile is left out. ErrNotFound
	// if there is no such lock.
	List(ctx context.Context, dir string) (Queue, error)
}

// HolderWatcher is a Conn that can tell whether the holder of a lock
// looks gone before the store ends its session (state.Lingering), for
// coordrun status and the waiting line to show: every engine here is one,
// by its own means. List leaves it out: contenders list queues on their
// way in, and the verdict costs reads of its own.
type HolderWatcher interface {
	// HolderLingering is the verdict on the holder of the lock in dir,
	// "" when there is none or nothing looks wrong.
	HolderLingering(ctx context.Context, dir string) (string, error)
}

// Entry is one contender's place in a lock's queue, and its hold.
//
// Fencing token: Token is the entry's Stat.Created. Holders take the lock
// in queue order, which is creation order, and an entry made again (after
// a rejoin) is made later, so the token rises from one holder of a lock to
// the next; anything the job writes elsewhere can refuse a lower token.
//
// Waiting: a contender waits on its predecessor in the queue only (a watch
// on that one entry), never on the whole folder, so that a release wakes
// one waiter, not all of them. When the predecessor goes it lists the
// queue again: it holds once it is lowest and the run record is its own.
//
// Interference: the store lets any authorized client delete any entry.
// If a waiter's own entry is deleted while its session lives, it joins
// the queue again at the end (a new entry, a new token). If the holder's
// entry or run record is deleted or changed by someone else, its standing
// is lost (WatchStanding), and its job must stop; its successor cannot
// know whether that job still runs, so it waits out the holder's bound
// (the holder's HolderInfo.Outlives, from the run record) before its own
// job may start (MustWait). A holder whose session ended is no
// interference: its job was killed before its lease ran out.
//
// An Entry belongs to the goroutine that entered it and is not safe for
// concurrent use, except that Retake and the channel of WatchStanding may
// be used from other goroutines while the owner waits for its job.
type Entry interface {
	// Dir is the lock's folder.
	Dir() string
	// Node is the full path of the entry ("" before it exists). It
	// changes when the entry was deleted by someone else and joined again.
	Node() string
	// Token is the fencing token: the entry's creation revision.
	Token() int64
	// Acquire blocks until the entry holds the lock. onStatus, if set, is
	// called whenever the position, the holder or its state changes.
	// When it returns nil, the caller checks MustWait and UncleanHandoff
	// before starting its work. ErrSessionLost if the session ends.
	Acquire(ctx context.Context, onStatus func(Status)) error
	// TryAcquire is Acquire that returns ErrNotAcquired as soon as
	// another contender holds the lock or is about to.
	TryAcquire(ctx context.Context, onStatus func(Status)) error
	// UncleanHandoff reports whether the previous holder's session ended
	// while it held (its work may have been cut short), as the folder's
	// record said when this entry took the lock.
	UncleanHandoff() bool
	// MustWait is how long the new holder must still wait before its work
	// may start, and why: the bound of a previous holder whose entries
	// someone else deleted. Zero when the handoff was clean.
	MustWait() (time.Duration, string)
	// WatchStanding watches the holder's entry and run record (a standing
	// watch, set once when the lock is taken) and delivers the first loss:
	// a deletion or change by anyone else. The channel has capacity 1 and
	// receives at most one Loss; nothing when ctx or the session ends.
	// Call it once, after Acquire returned nil.
	WatchStanding(ctx context.Context) <-chan Loss
	// Retake creates the run record again, marked Stopping, after someone
	// else deleted it, so that nobody takes the lock while the holder's
	// work is being stopped. Best effort: if another contender took it
	// meanwhile, there is nothing to keep. It returns once the create is
	// settled or ctx ends, and must return before Release is called.
	Retake(ctx context.Context, loss Loss)
	// Release leaves the queue: deletes the run record and the entry, and
	// records "released" in the folder if the standing was intact (else
	// leaves the record saying what happened). A no-op once the session
	// has ended: its entries went with it.
	Release(ctx context.Context) error
}

// Status is a waiting contender's view of the queue.
type Status struct {
	Position int // 0: next to hold, or holding
	Length   int
	// Holder is the run record's owner; Holder.Since is when it took the
	// lock.
	Holder     state.HolderInfo
	HolderNode string
	// Stopping: the previous holder still runs its work although it left
	// the queue (position 0 waits for it).
	Stopping bool
}

// What happened to a watched record: state's words.
const (
	LossDeleted = state.LossDeleted
	LossChanged = state.LossChanged
	LossMissing = state.LossMissing
)

// Loss is what happened to a record whose holder did not expect it.
type Loss = state.Loss

// Queue is a lock as a reader sees it.
type Queue struct {
	// Record is the folder's record of the last holder: "held NODE",
	// "stopping NODE" or "released NODE".
	Record string
	// Contenders in queue order: the first holds the lock or is next to.
	Contenders []state.Contender
	// Stopping is a previous holder that left the queue (its entry was
	// deleted) but still owns the run record while it stops its work.
	Stopping *state.RunInfo
	// Access describes who may change the lock's folder, in the store's
	// own notation ("" if it could not be read); Open: anyone may.
	Access string
	Open   bool
}
