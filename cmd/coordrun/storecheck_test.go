package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A member whose raft store has damaged pages refuses to start with one
// error that names the file and the repair, instead of a bbolt panic and
// a dump of every goroutine.
func TestServerRefusesDamagedStore(t *testing.T) {
	dir := t.TempDir()
	addrs := testkit.FreeAddrs(t, "127.0.0.1", 2)
	args := []string{"server", "--id", "1", "--data-dir", dir, "--client-addr", addrs[0], "--peer-addr", addrs[1]}
	p := procStart(t, "member", args...)
	conn := testkit.DialZK(t, []string{addrs[0]}, 15*time.Second)
	for i := range 400 {
		if _, err := conn.Create(fmt.Sprintf("/n%03d", i), make([]byte, 300), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}

	// Overwrite the page headers of the middle half of the file, as torn
	// or misdirected writes would.
	path := filepath.Join(dir, "raft.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	pages := len(b) / page
	for i := pages / 4; i < 3*pages/4; i++ {
		copy(b[i*page:], "\xde\xad\xbe\xef\xde\xad\xbe\xef\xff\xff\x7f\x7f\xff\xff\xff\x7f")
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	p = procStart(t, "member on a damaged store", args...)
	code := p.Exit(t, 30*time.Second)
	out := p.Out.String()
	if code == 0 || !strings.Contains(out, path+" is damaged") || !strings.Contains(out, "--join") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, "goroutine ") {
		t.Errorf("a goroutine dump reached the member's output:\n%s", out)
	}
}
