package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A watchdog started before the lock is entered learns the job's lock
// environment with Go: the job sees it, and sees the base environment too.
func TestGuardedJobLockEnv(t *testing.T) {
	exe, err := testkit.Binary(t.TempDir()) // $COORDRUN_BIN, or built
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "env")
	j, err := spawnGuarded(jobSpec{
		exe:   exe,
		argv:  []string{"sh", "-c", `printf '%s %s %s' "$COORDRUN_FENCING_TOKEN" "$LOCK_X" "$BASE" > ` + out},
		env:   append(os.Environ(), "BASE=base"),
		grace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	j.Go(BoottimeNow()+Boottime(time.Minute), []string{"COORDRUN_FENCING_TOKEN=77", "LOCK_X=a b"})
	select {
	case <-j.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not end")
	}
	if r := j.Result(); r.Code != 0 || r.Reason != reasonExit {
		t.Fatalf("job result %+v", r)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "77 a b base" {
		t.Errorf("the job saw %q, want the lock environment and the base one", strings.TrimSpace(got))
	}
}
