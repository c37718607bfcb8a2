package ensemble

import (
	"bytes"
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
