//go:build failpoint

package failpoint

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCheckReadsTheFileAtEveryCall(t *testing.T) {
	f := filepath.Join(t.TempDir(), "fp")
	t.Setenv("COORDRUN_FAILPOINTS_FILE", f)
	t.Setenv("COORDRUN_FAILPOINTS", "")
	if err := Check(StoreSync); err != nil {
		t.Fatalf("no file: %v", err)
	}
	if err := os.WriteFile(f, []byte("snapshot-write=ENOSPC\nraft-store-sync=EIO\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(StoreSync); !errors.Is(err, syscall.EIO) {
		t.Fatalf("armed: %v", err)
	}
	if err := Check(StoreWrite); err != nil {
		t.Fatalf("another point: %v", err)
	}
	os.Remove(f)
	if err := Check(StoreSync); err != nil {
		t.Fatalf("disarmed: %v", err)
	}
	t.Setenv("COORDRUN_FAILPOINTS", "raft-store-write=ENOSPC;snapshot-sync=EBOGUS")
	if err := Check(StoreWrite); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("from the environment: %v", err)
	}
	if err := Check(SnapshotSync); err == nil {
		t.Fatal("an unknown errno passed")
	}
}
