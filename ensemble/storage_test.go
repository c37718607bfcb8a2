package ensemble

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// Only a write the filesystem had no room for leaves the file as it was;
// a failed sync, or any other error, means the disk's content is unknown.
func TestDiskFullOrFault(t *testing.T) {
	cases := []struct {
		err  error
		full bool
	}{
		{&os.PathError{Op: "write", Path: "raft.db", Err: syscall.ENOSPC}, true},
		{fmt.Errorf("commit: %w", &os.PathError{Op: "write", Path: "raft.db", Err: syscall.EDQUOT}), true},
		{&os.PathError{Op: "write", Path: "raft.db", Err: syscall.EIO}, false},
		{syscall.ENOSPC, false}, // bbolt's fdatasync: a lost write
		{&os.PathError{Op: "sync", Path: "state.bin", Err: syscall.ENOSPC}, false},
		{errors.New("file sync error: input/output error"), false},
	}
	for _, c := range cases {
		if got := diskFull(c.err); got != c.full {
			t.Errorf("diskFull(%v) = %v, want %v", c.err, got, c.full)
		}
	}
}

// A full disk raises the alarm and is returned; anything else goes to the
// fault handler with the file named.
func TestStorageGuard(t *testing.T) {
	dir := t.TempDir()
	var faults []error
	log := testkit.SyncBuffer{}
	g := &storageGuard{dir: dir, log: slog.New(slog.NewTextHandler(&log, nil)), fault: func(err error) { faults = append(faults, err) }, ctx: t.Context()}
	var avail atomic.Uint64
	g.space = func() (uint64, uint64) { return avail.Load(), 100 << 20 }
	file := filepath.Join(dir, "raft.db")
	full := &os.PathError{Op: "write", Path: file, Err: syscall.ENOSPC}
	if err := g.failed(file, "raft log", full); !errors.Is(err, syscall.ENOSPC) || len(faults) != 0 {
		t.Fatalf("full disk: %v, faults %v", err, faults)
	}
	if a := g.alarm(); !strings.Contains(a, "disk full") || !strings.Contains(a, dir) {
		t.Fatalf("alarm %q", a)
	}
	if !log.HasLine("data dir is full", "data_dir="+dir, "free_bytes=") {
		t.Fatalf("log: %s", log.String())
	}
	// A write that succeeds on a still-full filesystem (bbolt reused a
	// page it had freed) does not clear the alarm; room does.
	avail.Store(64 << 10)
	g.ok()
	if a := g.alarm(); a == "" {
		t.Fatal("alarm cleared with 64 KiB free")
	}
	avail.Store(2 << 20)
	if a := g.alarm(); a != "" || !log.HasLine("data dir has space again") {
		t.Fatalf("alarm after a write %q; log %s", a, log.String())
	}
	_ = g.failed(file, "raft log", syscall.EIO)
	var fe *StorageFaultError
	if len(faults) != 1 || !errors.As(faults[0], &fe) || !errors.Is(faults[0], ErrStorageFault) {
		t.Fatalf("faults %v", faults)
	}
	if msg := fe.Error(); !strings.HasPrefix(msg, file+": raft log write failed: input/output error") || !strings.Contains(msg, "Start it again") {
		t.Fatalf("fault message %q", msg)
	}
}

// The packaged alert rules use only metrics a member exports, and the
// data dir's size is among them.
func TestAlertRulesUseMemberMetrics(t *testing.T) {
	c := startCluster(t, 1, withAdmin)
	m := c.waitLeader()
	conn := testkit.DialZK(t, []string{m.ClientAddr()}, 10*time.Second)
	if _, err := conn.Create("/x", make([]byte, 4096), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	s := scrapeMetrics(t, m)
	if v, ok := s.value("coordrun_data_dir_bytes"); !ok || v < 4096 {
		t.Fatalf("coordrun_data_dir_bytes = %v, %v", v, ok)
	}
	if v, ok := s.value("coordrun_data_dir_filesystem_free_bytes"); !ok || v <= 0 {
		t.Fatalf("coordrun_data_dir_filesystem_free_bytes = %v, %v", v, ok)
	}
	if v, ok := s.value("coordrun_disk_full"); !ok || v != 0 {
		t.Fatalf("coordrun_disk_full = %v, %v", v, ok)
	}
	rules, err := os.ReadFile("../packaging/prometheus/coordrun-disk.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`coordrun_[a-z_]+`).FindAllString(string(rules), -1)
	if len(names) < 3 {
		t.Fatalf("rules name %v", names)
	}
	for _, n := range names {
		if _, ok := s[n]; !ok {
			t.Errorf("the alert rules use %s, which a member does not export", n)
		}
	}
}
