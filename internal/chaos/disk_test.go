package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// failpointBinary is coordrun built with -tags failpoint:
// $COORDRUN_FAILPOINT_BIN, or one built here.
func failpointBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("COORDRUN_FAILPOINT_BIN"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "coordrun-failpoint")
	cmd := exec.Command("go", "build", "-tags", "failpoint", "-o", bin, "./cmd/coordrun")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building coordrun with failpoints: %v\n%s", err, out)
	}
	return bin
}

// TestChaosDisk runs the workload under disk faults only: fsync failures
// on the leader and on followers (each member must stop, naming its file,
// and come back from its disk), and filesystems filled to the last byte
// on one member and on all of them (the ensemble must go on while a
// quorum can write and catch up once space is freed). Every check of the
// chaos suite holds: no acknowledged write lost, linearizable histories,
// identical trees.
func TestChaosDisk(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	d := 20 * time.Second
	if s := os.Getenv("COORDRUN_CHAOS_DURATION"); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("COORDRUN_CHAOS_DURATION: %v", err)
		}
		d = v
	}
	bin := failpointBinary(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %s", seed, d)
	dir, err := os.MkdirTemp("", "ensemble-chaos-disk-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Cluster:  Config{Bin: bin, Dir: dir, Members: 3, Log: testLog{t}, DiskBytes: 48 << 20, Failpoints: true},
		Duration: d,
		Seed:     seed,
		Faults:   []string{FaultFsync, FaultFsyncLeader, FaultDiskFull, FaultDiskFullAll},
	})
	if err != nil {
		if strings.Contains(err.Error(), "namespace of its own") {
			t.Skipf("no small filesystem without root here: %v", err)
		}
		t.Fatalf("seed %d: %v (member logs in %s)", seed, err, dir)
	}
	t.Log("\n" + rep.Summary())
	if len(rep.Violations) > 0 {
		t.Fatalf("seed %d: %d violations; member logs and history kept in %s", seed, len(rep.Violations), dir)
	}
	if rep.OK == 0 {
		t.Fatalf("no operation succeeded")
	}
	os.RemoveAll(dir)
}
