// Package failpoint injects storage faults into a member for tests. A
// binary built without the "failpoint" build tag (every release build)
// has no failpoints: Check is a constant nil the compiler removes.
//
// Built with -tags failpoint, Check reads the points to fail from the
// file named by $COORDRUN_FAILPOINTS_FILE at every call (so a test can
// arm and disarm a running member), then from $COORDRUN_FAILPOINTS: one
// point a line (or ';'-separated), NAME=ERRNO, e.g.
//
//	raft-store-sync=EIO
//	raft-store-write=ENOSPC
//
// The points coordrun has are the constants below.
package failpoint

import "syscall"

// The failpoints of the storage path (ensemble/storage.go).
const (
	// StoreWrite fails a write to raft.db (the log or the stable store)
	// before it reaches the file, as a failed pwrite does.
	StoreWrite = "raft-store-write"
	// StoreSync lets a write to raft.db reach the file and then fails
	// it, as a failed fsync does: what the disk holds is unknown.
	StoreSync = "raft-store-sync"
	// SnapshotWrite fails a write to a snapshot being taken.
	SnapshotWrite = "snapshot-write"
	// SnapshotSync fails a snapshot's close, where it is synced.
	SnapshotSync = "snapshot-sync"
)

// errnos are the error numbers a failpoint may name.
var errnos = map[string]syscall.Errno{
	"EIO":    syscall.EIO,
	"ENOSPC": syscall.ENOSPC,
	"EDQUOT": syscall.EDQUOT,
	"EROFS":  syscall.EROFS,
}
