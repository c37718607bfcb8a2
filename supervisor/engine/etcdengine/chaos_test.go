package etcdengine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The singleton promise on etcd under faults: three hosts loop on
// `coordrun run` of one job that beats (appends a timestamp and its token
// to a file) every 20 ms for about a second. Meanwhile the holder's
// coordrun is killed -9, frozen past its lease and thawed, and the etcd
// leader is killed and restarted. Afterwards the beats, sorted by time,
// must never go back to a lower token (no two jobs ran at once, tokens
// rose), and the frozen holder's job must have beaten for the last time
// before etcd itself found its lease gone (TimeToLive).
func TestEtcdRunChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	c := testkit.StartEtcd(t, 3)
	conn := dial(t, c, 3*time.Second)
	beats := filepath.Join(t.TempDir(), "beats")
	job := fmt.Sprintf(`for i in $(seq 50); do echo "$(date +%%s.%%N) $COORDRUN_FENCING_TOKEN" >> %s; sleep 0.02; done`, beats)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for h := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				cmd := exec.Command(coordrun(t), "run", "--servers", c.Servers(), "--session-timeout", "3s", "--kill-grace", "300ms",
					"--name", "job", "-q", "--", "sh", "-c", job)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
				p, err := testkit.StartProcess(cmd)
				if err != nil {
					t.Errorf("host %d: %v", h, err)
					return
				}
				select {
				case <-p.Done():
				case <-ctx.Done():
					p.Kill()
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	// holderPID waits for a holder whose token is above after, and
	// returns its coordrun's pid, its token and its lease.
	holder := func(after int64) (int, int64, string) {
		var ri state.RunInfo
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("a holder with a token above %d", after), func() bool {
			out, err := c.EtcdctlErr("get", "--print-value-only", "/coordrun/locks/job/run")
			ri = state.RunInfo{}
			return err == nil && json.Unmarshal([]byte(strings.TrimSpace(out)), &ri) == nil && ri.Token > after && ri.PID > 0
		})
		lease, _ := entryLease(ri.Node)
		return ri.PID, ri.Token, strconv.FormatInt(int64(lease), 16)
	}

	var token int64
	// kill -9 of the holder's coordrun: its watchdog kills the job at once;
	// the lease expires on its own.
	for range 2 {
		pid, tok, _ := holder(token)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		token = tok
	}
	// SIGSTOP of the holder's coordrun past its lease: its watchdog kills
	// the job at the deadline; etcd expires the lease; another takes over.
	pid, frozenTok, frozenLease := holder(token)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	var expired time.Time
	testkit.WaitFor(t, 20*time.Second, "etcd to find the frozen holder's lease gone", func() bool {
		id, _ := strconv.ParseInt(frozenLease, 16, 64)
		r, err := conn.cli.TimeToLive(context.Background(), clientv3.LeaseID(id))
		if err == nil && r.TTL < 0 { // -1: gone; 0: under a second left
			expired = time.Now()
			return true
		}
		return false
	})
	_, token, _ = holder(frozenTok)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	// The etcd leader killed under a holder, and back.
	_, tok, _ := holder(token)
	leader := leaderIndex(t, conn, c)
	c.Kill(leader)
	c.Restart(leader)
	c.WaitHealthy(30 * time.Second)
	holder(tok)

	stop()
	wg.Wait()
	recs := readBeats(t, beats)
	for i := 1; i < len(recs); i++ {
		if recs[i].token < recs[i-1].token {
			t.Fatalf("token %d beat at %v, after token %d beat at %v: two jobs ran at once",
				recs[i].token, recs[i].at, recs[i-1].token, recs[i-1].at)
		}
	}
	var lastFrozen time.Time
	tokens := map[int64]bool{}
	for _, r := range recs {
		tokens[r.token] = true
		if r.token == frozenTok {
			lastFrozen = r.at
		}
	}
	if lastFrozen.IsZero() || !lastFrozen.Before(expired) {
		t.Fatalf("the frozen holder's job beat last at %v; etcd found its lease gone at %v", lastFrozen, expired)
	}
	t.Logf("%d beats of %d holders; the frozen holder's job beat last %v before etcd found its lease gone",
		len(recs), len(tokens), expired.Sub(lastFrozen).Round(time.Millisecond))
}

type beat struct {
	at    time.Time
	token int64
}

func readBeats(t *testing.T, file string) []beat {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var bs []beat
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		secs, err1 := strconv.ParseFloat(f[0], 64)
		tok, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		bs = append(bs, beat{at: time.Unix(0, int64(secs*1e9)), token: tok})
	}
	slices.SortStableFunc(bs, func(a, b beat) int { return a.at.Compare(b.at) })
	return bs
}
