// Package fencing lets a resource refuse work from a lock holder that no
// longer holds the lock.
//
// # Why fencing tokens
//
// coordrun kills a job before its session's lease can end, so two holders
// of one lock never run at once — as long as the supervisor's host keeps
// running. A host that freezes as a whole (a VM paused for migration, a
// long swap storm, a laptop lid) stops the job, its supervisor and its
// watchdog together. While it is frozen the session expires, the lock
// passes to another host, and the next holder does its work. Then the
// frozen host resumes, and its job carries on from the instruction where it
// stopped, believing it still holds the lock: no check the job made before
// the freeze can help, because the freeze can fall between any check and
// the write that follows it.
//
// Only the resource can tell the two writes apart. Every holder gets a
// number, the fencing token, that is larger than the number of every
// earlier holder of the same lock. The resource remembers the highest token
// it has seen per lock (its high-water mark) and rejects a write that
// carries a lower one. The resumed job's write then fails instead of
// overwriting the newer holder's work.
//
// # The token
//
// The token is the czxid of the holder's lock node: the zxid of the
// transaction that created the node. The supervisor passes it to the job in
// the environment variable COORDRUN_FENCING_TOKEN ([EnvToken]) as a decimal
// int64; [FromEnv] reads it and [Parse] parses it.
//
// A zxid rises with every write transaction of the ensemble and is never
// reused. The lock queue hands the lock to the present node with the lowest
// sequence number, and a node created later gets both a higher sequence
// number and a higher zxid, so each new holder's token exceeds its
// predecessor's. This holds on a coordrun ensemble, where the zxid comes
// from the raft log position of the write, and on Apache ZooKeeper, where the zxid is
// epoch<<32 | counter and each new leader starts a higher epoch, so tokens
// keep rising across leader failovers. The same holder keeps its token for
// the whole run, so a resource accepts a token equal to its mark: one run
// may write many times.
//
// # Guard
//
// A [Guard] keeps the high-water marks of a resource in a small JSON file
// ({"locks": {"nightly": 42}}). [Guard.Accept] checks a token against the
// mark of its lock and raises the mark, atomically across goroutines and
// processes (flock(2) on a sibling lock file) and durably (write to a
// temporary file, fsync, rename, fsync the directory). A lower token gets a
// [*StaleTokenError], which matches [ErrStaleToken]. [Guard.Do] runs the
// resource's write while the guard is still locked, so that no newer holder
// can be accepted between the check and the write. The command
// `coordrun fence check` wraps Accept for shell jobs.
//
// # Caveats
//
//   - Fencing protects only what checks. Every path that writes to the
//     resource must present the token to the same guard; a write that
//     bypasses it is not fenced.
//   - The check and the write must be one atomic step. A writer that is
//     frozen after Accept returned and before it wrote can still write
//     late. Use [Guard.Do], or serialize the writers of the resource
//     around both steps (examples/fenced-store takes a lock on the data
//     file).
//   - Tokens compare only within one lock of one ensemble. A fresh ensemble
//     starts its zxids again near zero: after moving a lock to a new
//     ensemble, every new token is below the old mark and is rejected until
//     the lock's mark is removed from the state file, deliberately, while no
//     old holder can run.
//   - An equal token is accepted, so fencing does not deduplicate retries
//     of one run; make the writes idempotent if a run may repeat one.
//   - Keep the state file on a local file system, on the host that applies
//     the writes. flock(2) and rename(2) are not reliably atomic across
//     hosts on network file systems; for a resource shared by several
//     hosts, run the guard inside the resource's server.
//   - Deleting the state file forgets every mark. A corrupt state file is
//     reported as [ErrCorruptState] and never silently reset.
package fencing
