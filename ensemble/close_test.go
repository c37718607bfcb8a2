package ensemble

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// memberGoroutines counts the goroutines running code of this package
// (test code aside): a member's goroutines, and raft's while they are in
// the member's transport or state machine.
func memberGoroutines() (int, string) {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var first string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		for i := 1; i+1 < len(lines); i += 2 {
			fn, file := lines[i], strings.TrimSpace(lines[i+1])
			if strings.HasPrefix(fn, "github.com/coordrun/coordrun/ensemble.") && !strings.Contains(file, "_test.go:") {
				n++
				if first == "" {
					first = string(g)
				}
				break
			}
		}
	}
	return n, first
}

// Close returns once every goroutine of the member has ended, whatever it
// was doing: serving a session on a follower (forwarded writes, a sync, a
// watch), answering status and health, and holding connections that never
// said a word on either port, which Close ends rather than waiting out
// their read deadlines.
func TestCloseJoinsGoroutines(t *testing.T) {
	before, _ := memberGoroutines()
	c := startCluster(t, 3, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	leader := c.Leader()
	fol := (leader + 1) % 3
	conn := testkit.DialZK(t, []string{c.ClientAddr(fol)}, 4*time.Second)
	if _, err := conn.Create("/close", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Sync("/close"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := conn.GetW("/close"); err != nil {
		t.Fatal(err)
	}
	if out := fourLetter(t, c.ClientAddr(fol), statusWord); !strings.Contains(out, `"members"`) {
		t.Fatalf("mbrs: %q", out)
	}
	resp, err := http.Get("http://" + c.Member(fol).AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, addr := range []string{c.ClientAddr(fol), c.Member(fol).PeerAddr(), c.Member(leader).PeerAddr()} {
		silent, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
	}
	if n, _ := memberGoroutines(); n <= before {
		t.Fatalf("%d goroutines in member code while serving, %d before", n, before)
	}

	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("closing the members took %v: a silent connection was waited for", d)
	}
	testkit.WaitFor(t, 5*time.Second, "no goroutine left in member code", func() bool {
		n, _ := memberGoroutines()
		return n <= before
	})
	conn.Close()
}

// memberLogs gives every member a log of its own, by id.
func memberLogs(logs map[string]*testkit.SyncBuffer) func(*Config) {
	return func(cfg *Config) {
		if logs[cfg.ID] == nil {
			logs[cfg.ID] = &testkit.SyncBuffer{}
		}
		cfg.Logger = slog.New(slog.NewTextHandler(logs[cfg.ID], nil))
	}
}

// A leader that is stopped hands its leadership to a follower before it
// goes: its log names the new leader, whom the others follow, and writes
// go on through a follower's session. A lone member has nobody to hand
// over to and does not try.
func TestCloseHandsOffLeadership(t *testing.T) {
	logs := map[string]*testkit.SyncBuffer{}
	c := startCluster(t, 3, memberLogs(logs))
	li := c.WaitLeader(t)
	old := c.Member(li).ID()
	fi := (li + 1) % 3
	conn := testkit.DialZK(t, []string{c.ClientAddr(fi)}, 5*time.Second)
	if _, err := conn.Create("/before", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	c.Stop(li)
	const line = "leadership handed over before stopping"
	log := logs[old].String()
	i := strings.Index(log, line)
	if i < 0 {
		t.Fatalf("member %s stopped as leader without handing over:\n%s", old, log)
	}
	var to string
	for _, f := range strings.Fields(log[i:]) {
		if v, ok := strings.CutPrefix(f, "to="); ok {
			to = v
			break
		}
	}
	if to == "" || to == old || to == `"unknown` {
		t.Fatalf("handed over to %q: %s", to, log[i:])
	}
	if got := c.Member(c.WaitLeader(t)).ID(); got != to {
		t.Errorf("the ensemble follows %s, the old leader handed over to %s", got, to)
	}
	if _, err := conn.Create("/after", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Errorf("write after the handover: %v", err)
	}

	lone := map[string]*testkit.SyncBuffer{}
	one := startCluster(t, 1, memberLogs(lone))
	one.WaitLeader(t)
	one.Stop(0)
	if l := lone["1"].String(); strings.Contains(l, "leadership") {
		t.Errorf("a lone member tried to hand over:\n%s", l)
	}
}
