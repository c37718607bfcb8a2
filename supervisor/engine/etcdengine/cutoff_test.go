package etcdengine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/internal/netfault"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
)

// A holder cut off from etcd by the kernel (its packets dropped, nothing
// reset): its watchdog kills the job before etcd expires the lease (as
// etcd's own TimeToLive tells, asked through another address), and the
// next in line, which reaches etcd, starts only after that.
func TestEtcdRunHolderCutOff(t *testing.T) {
	chain := netfault.ForTest(t)
	c := testkit.StartEtcd(t, 1)
	m := c.Members[0]
	cut := strings.TrimPrefix(m.ClientURL, "http://")
	other := strings.TrimPrefix(m.AltClientURL, "http://")
	conn, err := Dial(testkit.Context(t, 30*time.Second), Config{Endpoints: []string{other}, SessionTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	beats := filepath.Join(t.TempDir(), "beats")
	job := fmt.Sprintf(`while :; do echo "$(date +%%s.%%N) $COORDRUN_FENCING_TOKEN" >> %s; sleep 0.02; done`, beats)
	start := func(name, server, script string) *testkit.Process {
		cmd := exec.Command(coordrun(t), "run", "--servers", "etcd://"+server, "--session-timeout", "3s", "--kill-grace", "300ms",
			"--name", "job", "-q", "--", "sh", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		return testkit.Spawn(t, name, cmd)
	}
	holder := start("holder", cut, job)
	testkit.WaitFor(t, 15*time.Second, "the holder's job beating", func() bool { _, err := os.Stat(beats); return err == nil && len(readBeats(t, beats)) > 0 })
	next := start("next", other, fmt.Sprintf(`echo "$(date +%%s.%%N) $COORDRUN_FENCING_TOKEN" >> %s`, beats))
	var ri state.RunInfo
	testkit.WaitFor(t, 15*time.Second, "the next in line queued", func() bool {
		q, err := conn.List(context.Background(), "/coordrun/locks/job")
		return err == nil && len(q.Contenders) == 2
	})
	b, _, err := conn.Get(testkit.Context(t, 5*time.Second), "/coordrun/locks/job/run")
	if err != nil || json.Unmarshal(b, &ri) != nil {
		t.Fatalf("run record: %v %q", err, b)
	}
	lease, _ := entryLease(ri.Node)

	if err := chain.DropAddr(cut); err != nil {
		t.Fatal(err)
	}
	var expired time.Time
	testkit.WaitFor(t, 20*time.Second, "etcd to expire the cut-off holder's lease", func() bool {
		r, err := conn.cli.TimeToLive(context.Background(), clientv3.LeaseID(lease))
		if err == nil && r.TTL < 0 { // -1: gone; 0: under a second left
			expired = time.Now()
			return true
		}
		return false
	})
	if code := next.Exit(t, 20*time.Second); code != 0 {
		t.Fatalf("next run exited %d", code)
	}
	if err := chain.Heal(); err != nil {
		t.Fatal(err)
	}
	if code := holder.Exit(t, 30*time.Second); code != supervisor.ExitSessionLost {
		t.Fatalf("cut-off holder exited %d, want %d", code, supervisor.ExitSessionLost)
	}
	bs := readBeats(t, beats)
	var last, first time.Time
	for _, b := range bs {
		switch b.token {
		case ri.Token:
			last = b.at
		default:
			if first.IsZero() && b.token > ri.Token {
				first = b.at
			}
		}
	}
	if last.IsZero() || first.IsZero() || !last.Before(expired) || !first.After(last) {
		t.Fatalf("holder's job beat last at %v, etcd found its lease gone at %v, the next job began at %v", last, expired, first)
	}
	t.Logf("the cut-off holder's job beat last %v before etcd found its lease gone", expired.Sub(last).Round(time.Millisecond))
}
