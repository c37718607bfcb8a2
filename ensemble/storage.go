package ensemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/internal/failpoint"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"
)

// The member's storage and what it does when the disk fails it. Every
// write to the data dir goes through a guard that sorts a failure into
// one of two kinds:
//
//   - The disk is full (ENOSPC or EDQUOT from a write, before any sync):
//     bbolt rolled the transaction back, so nothing on disk changed. The
//     member raises its disk-full alarm, refuses what it cannot persist
//     (raft then steps a leader down, and a follower answers its leader
//     that it did not append) and takes writes again as soon as one
//     succeeds: no operator's repair.
//   - Anything else, above all a failed fsync: what the disk holds is
//     unknown, and retrying the sync could succeed on a page cache that
//     already dropped the pages (PostgreSQL's "fsyncgate", 2018). The
//     member stops (Config.StorageFault) and a restart resumes from what
//     the disk holds, as after a crash.
//
// The failpoints (internal/failpoint) exist only in a binary built with
// the failpoint tag.

// ErrStorageFault is what StorageFaultError matches with errors.Is.
var ErrStorageFault = errors.New("storage fault")

// StorageFaultError is a write or sync of a data file that failed in a
// way the member cannot go on from.
type StorageFaultError struct {
	File string
	Op   string // what was being written: "raft log", "stable store", "snapshot"
	Err  error
}

func (e *StorageFaultError) Error() string {
	return fmt.Sprintf("%s: %s write failed: %v; the member stops rather than serve from data the disk may not hold. "+
		"Start it again once the disk is sound: it resumes from what is on disk, as after a crash "+
		"(if the file is then reported damaged, see the repair in docs/disk.md)", e.File, e.Op, e.Err)
}

func (e *StorageFaultError) Unwrap() error { return e.Err }

func (e *StorageFaultError) Is(target error) bool { return target == ErrStorageFault }

// diskFull says whether err is a write the filesystem had no room for.
// bbolt writes pages with pwrite (an *os.PathError "write") and syncs
// with fdatasync (a bare errno): only the first leaves the file as it
// was. An ENOSPC from a sync (NFS reports it there) is a lost write.
func diskFull(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" {
		return false
	}
	return errors.Is(pe.Err, syscall.ENOSPC) || errors.Is(pe.Err, syscall.EDQUOT)
}

// storageGuard is the state the guarded stores share: the disk-full
// alarm and where a fault goes.
type storageGuard struct {
	dir   string
	log   *slog.Logger
	fault func(error) // must not return: Config.StorageFault
	ctx   context.Context
	// space, when set, replaces the data dir's filesystem statistics
	// (a unit test's full disk).
	space func() (avail, total uint64)

	full      atomic.Bool
	fullSince atomic.Int64 // unix ms when the alarm was raised
	fullErrs  atomic.Int64 // writes refused for want of space

	// sizeMu guards size and sized: the data dir's size, measured at most
	// once a second however often the metrics are read.
	sizeMu sync.Mutex
	size   int64
	sized  time.Time
}

// failed handles a failed write of op to file. A full disk is returned
// (the caller refuses the write); anything else ends the member.
func (g *storageGuard) failed(file, op string, err error) error {
	if diskFull(err) {
		g.fullErrs.Add(1)
		if g.full.CompareAndSwap(false, true) {
			g.fullSince.Store(time.Now().UnixMilli())
			free, _ := g.free()
			g.log.Error("data dir is full: this member refuses writes it cannot make durable until space is freed; the others go on while they have a quorum",
				"data_dir", g.dir, "free_bytes", free, "file", file, "err", err)
		}
		return err
	}
	g.fault(&StorageFaultError{File: file, Op: op, Err: err})
	return err // only a fault handler that returns (a test's) gets here
}

// clearFree is the free space, at least, at which a write that reached
// the disk clears the alarm: bbolt reuses the pages it freed, so writes
// succeed now and then on a filesystem that is still full, and the alarm
// would flap.
func clearFree(total uint64) uint64 { return max(1<<20, total/100) }

// ok clears the alarm after a write that reached the disk, once the
// filesystem has room again.
func (g *storageGuard) ok() {
	if !g.full.Load() {
		return
	}
	free, total := g.free()
	if free < clearFree(total) {
		return
	}
	if g.full.CompareAndSwap(true, false) {
		g.log.Info("data dir has space again: writes resume", "data_dir", g.dir, "free_bytes", free,
			"full_for", time.Since(time.UnixMilli(g.fullSince.Load())).Round(time.Millisecond))
	}
}

// free is the space an unprivileged writer has left on the data dir's
// filesystem, and that filesystem's size.
func (g *storageGuard) free() (avail, total uint64) {
	if g.space != nil {
		return g.space()
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(g.dir, &st); err != nil {
		return 0, 0
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize)
}

// dirSize is the bytes the data dir's files take.
func (g *storageGuard) dirSize() int64 {
	g.sizeMu.Lock()
	defer g.sizeMu.Unlock()
	if time.Since(g.sized) < time.Second {
		return g.size
	}
	var n int64
	_ = filepath.WalkDir(g.dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	g.size, g.sized = n, time.Now()
	return n
}

// collectors are the storage metrics.
func (g *storageGuard) collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	return []prometheus.Collector{
		gauge("coordrun_disk_full", "1 while the data dir's filesystem has no room for the member's writes, else 0.", func() float64 {
			if g.full.Load() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coordrun_disk_full_errors_total",
			Help: "Writes to the data dir refused because its filesystem was full."},
			func() float64 { return float64(g.fullErrs.Load()) }),
		gauge("coordrun_data_dir_bytes", "Bytes of the data dir's files (raft log, stable store, snapshots).",
			func() float64 { return float64(g.dirSize()) }),
		gauge("coordrun_data_dir_filesystem_bytes", "Size of the filesystem holding the data dir.",
			func() float64 { _, t := g.free(); return float64(t) }),
		gauge("coordrun_data_dir_filesystem_free_bytes", "Bytes left for the member on the data dir's filesystem.",
			func() float64 { a, _ := g.free(); return float64(a) }),
	}
}

// guardedStore is the raft-boltdb store (log and stable store in one
// file) with every write checked by the guard.
type guardedStore struct {
	*raftboltdb.BoltStore
	path string
	g    *storageGuard
}

// write runs one write of the store: the failpoints, the write, and the
// verdict on its error.
func (s *guardedStore) write(op string, f func() error) error {
	if err := failpoint.Check(failpoint.StoreWrite); err != nil {
		return s.g.failed(s.path, op, &os.PathError{Op: "write", Path: s.path, Err: err})
	}
	err := f()
	if err == nil {
		err = failpoint.Check(failpoint.StoreSync)
	}
	if err != nil {
		return s.g.failed(s.path, op, err)
	}
	s.g.ok()
	return nil
}

func (s *guardedStore) StoreLog(l *raft.Log) error {
	return s.write("raft log", func() error { return s.BoltStore.StoreLog(l) })
}

func (s *guardedStore) StoreLogs(ls []*raft.Log) error {
	return s.write("raft log", func() error { return s.BoltStore.StoreLogs(ls) })
}

func (s *guardedStore) DeleteRange(lo, hi uint64) error {
	return s.write("raft log", func() error { return s.BoltStore.DeleteRange(lo, hi) })
}

// Set and SetUint64 hold raft's term and vote. Raft panics when it cannot
// store them, so on a full disk they wait for space instead, as long as
// the member runs; meanwhile raft does not vote or campaign here, and the
// others go on without this member.
func (s *guardedStore) Set(k, v []byte) error {
	return s.stable(func() error { return s.BoltStore.Set(k, v) })
}

func (s *guardedStore) SetUint64(k []byte, v uint64) error {
	return s.stable(func() error { return s.BoltStore.SetUint64(k, v) })
}

// stableRetry is how often a stable-store write is tried again while the
// disk is full.
const stableRetry = 500 * time.Millisecond

func (s *guardedStore) stable(f func() error) error {
	for {
		err := s.write("stable store", f)
		if err == nil || !diskFull(err) {
			return err
		}
		select {
		case <-s.g.ctx.Done():
			// Raft is shutting down and would panic on this error: stop
			// the member the orderly way instead.
			s.g.fault(&StorageFaultError{File: s.path, Op: "stable store", Err: err})
			return err
		case <-time.After(stableRetry):
		}
	}
}

// guardedSnapshots is the file snapshot store with its writes checked.
// A snapshot that fails is discarded by raft (it is not renamed into
// place) and taken again later; only a failure other than a full disk
// ends the member, as for the log.
type guardedSnapshots struct {
	*raft.FileSnapshotStore
	dir string
	g   *storageGuard
}

func (s *guardedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration,
	confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil {
		return nil, s.g.failed(s.dir, "snapshot", err)
	}
	return &guardedSink{SnapshotSink: sink, file: filepath.Join(s.dir, "snapshots", sink.ID()), g: s.g}, nil
}

type guardedSink struct {
	raft.SnapshotSink
	file string
	g    *storageGuard
}

func (s *guardedSink) Write(p []byte) (int, error) {
	if err := failpoint.Check(failpoint.SnapshotWrite); err != nil {
		return 0, s.g.failed(s.file, "snapshot", &os.PathError{Op: "write", Path: s.file, Err: err})
	}
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		return n, s.g.failed(s.file, "snapshot", err)
	}
	return n, nil
}

func (s *guardedSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil {
		err = failpoint.Check(failpoint.SnapshotSync)
	}
	if err != nil {
		return s.g.failed(s.file, "snapshot", err)
	}
	s.g.ok()
	return nil
}

// defaultStorageFault ends the process: a member must not serve on after
// a write it cannot vouch for, and nothing short of a new process clears
// what the page cache may hold.
func defaultStorageFault(log *slog.Logger) func(error) {
	return func(err error) {
		log.Error("storage fault: stopping", "err", err)
		fmt.Fprintln(os.Stderr, "coordrun: "+err.Error())
		os.Exit(1)
	}
}

// openStorage checks and opens the data dir's raft store and snapshot
// store, both guarded, and registers the storage metrics.
//
// bbolt locks its file; without a timeout a second member pointed at the
// same data dir would wait for that lock forever. Its free list is not
// written with every transaction but rebuilt when the file is opened (as
// Consul runs raft-boltdb): the log's head is deleted after every
// snapshot, so the list grows with the file's churn, and every append
// (which a write waits for twice, on the leader and on a follower) would
// write all of it. Durability is the same: the list is derived from the
// pages.
func (m *Member) openStorage(hlog *raftLog) (*guardedStore, *guardedSnapshots, error) {
	cfg := m.cfg
	path := filepath.Join(cfg.DataDir, "raft.db")
	check := cfg.StoreCheck
	if check == nil {
		check = CheckStore
	}
	if err := check(path); err != nil {
		return nil, nil, err
	}
	if err := checkSnapshot(cfg.DataDir); err != nil {
		return nil, nil, err
	}
	fault := cfg.StorageFault
	if fault == nil {
		fault = defaultStorageFault(m.log)
	}
	g := &storageGuard{dir: cfg.DataDir, log: m.log, fault: fault, ctx: m.ctx}
	bolt, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		BoltOptions: &bbolt.Options{
			Timeout:        2 * time.Second,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, nil, configError("DataDir", "data dir %s is in use by another process", cfg.DataDir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("raft store %s: %w", path, err)
	}
	m.store = bolt
	if err := verifyLog(path, bolt, bolt); err != nil {
		return nil, nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.SnapshotRetain, hlog)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot store: %w", err)
	}
	m.storage = g
	m.metrics.reg.MustRegister(g.collectors()...)
	m.metrics.reg.MustRegister(m.env.quota.collectors()...)
	m.metrics.reg.MustRegister(m.zkq.collectors()...)
	return &guardedStore{BoltStore: bolt, path: path, g: g}, &guardedSnapshots{FileSnapshotStore: snaps, dir: cfg.DataDir, g: g}, nil
}

// alarm is the disk-full alarm's text, or "".
func (g *storageGuard) alarm() string {
	// An idle member writes nothing that would clear the alarm once an
	// operator freed space: looking is enough.
	g.ok()
	if !g.full.Load() {
		return ""
	}
	free, _ := g.free()
	return fmt.Sprintf("disk full: data dir %s has %d bytes free; writes this member cannot persist are refused since %s (free space there: it resumes by itself)",
		g.dir, free, time.UnixMilli(g.fullSince.Load()).UTC().Format(time.RFC3339))
}

// alarms are the member's raised alarms, for its status.
func (m *Member) alarms() []string {
	var out []string
	if a := m.env.quota.alarm(); a != "" {
		out = append(out, a)
	}
	if m.storage != nil {
		if a := m.storage.alarm(); a != "" {
			out = append(out, a)
		}
	}
	return out
}
