package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A member whose data dir was damaged while it was down (a truncated
// raft.db, a flipped byte in the stable store's term, a flipped byte in
// its newest snapshot) refuses to start, naming the file and the repair;
// the documented repair (remove it, start it empty with --join, add it
// back) brings it back with every acknowledged write, from the leader's
// snapshot.
func TestDamagedFilesRepair(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string) string // returns the file it damaged
	}{
		{"truncated log tail", func(t *testing.T, dir string) string {
			// Cut the file below its high-water mark (the page count in
			// the newer of bbolt's two meta pages), where its newest
			// pages are: a bare file size would include room bbolt
			// allocated ahead and never used.
			path := filepath.Join(dir, "raft.db")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			const page, hwm, txid = 4096, 56, 64 // offsets in a meta page
			meta := b[:page]
			if binary.LittleEndian.Uint64(b[page+txid:]) > binary.LittleEndian.Uint64(b[txid:]) {
				meta = b[page : 2*page]
			}
			pages := int64(binary.LittleEndian.Uint64(meta[hwm:]))
			if err := os.Truncate(path, pages*page/2); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"stable store term", func(t *testing.T, dir string) string {
			// The term's 8 bytes follow its key in bbolt's leaf page:
			// zeroing them leaves a term below the log's.
			path := filepath.Join(dir, "raft.db")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Every copy: bbolt leaves older ones in free pages.
			key := []byte("CurrentTerm")
			n := 0
			for i := bytes.Index(b, key); i >= 0; i = bytes.Index(b[i+1:], key) + i + 1 {
				copy(b[i+len(key):], make([]byte, 8))
				n++
				if bytes.Index(b[i+1:], key) < 0 {
					break
				}
			}
			if n == 0 {
				t.Fatal("no CurrentTerm in raft.db")
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"snapshot byte", func(t *testing.T, dir string) string {
			snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
			sort.Strings(snaps)
			if len(snaps) == 0 {
				t.Fatal("no snapshot")
			}
			path := snaps[len(snaps)-1]
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			testDamageRepair(t, tc.damage)
		})
	}
}

func testDamageRepair(t *testing.T, damage func(*testing.T, string) string) {
	layout, err := testkit.NewProcessEnsemble(procBin, "127.0.0.1", t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	layout.Args = append(testkit.RaftFlags(), "--snapshot-threshold", "64", "--snapshot-interval", "200ms", "--trailing-logs", "16")
	sockDir, err := os.MkdirTemp("", "repair")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := func(i int) string { return filepath.Join(sockDir, fmt.Sprint(i+1)) }
	procs := make([]*proc, 3)
	start := func(i int, extra ...string) {
		procs[i] = procStart(t, fmt.Sprintf("member %d", i+1), layout.ServerArgs(i, append([]string{"--admin-socket", sock(i)}, extra...)...)...)
	}
	for i := range procs {
		start(i)
	}
	e := &procEnsemble{ProcessEnsemble: layout, t: t}
	e.waitHealthy(30*time.Second, 0)

	conn := testkit.DialZK(t, []string{layout.ClientAddrs[0], layout.ClientAddrs[1]}, 15*time.Second)
	var acked []string
	for i := range 300 {
		p := fmt.Sprintf("/n%03d", i)
		if _, err := conn.Create(p, make([]byte, 100), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, p)
	}
	st := e.waitHealthy(30*time.Second, 0)
	victim := 2
	if st.Leader == "3" {
		victim = 1
	}
	dir := layout.Dirs[victim]
	testkit.WaitFor(t, 20*time.Second, "a snapshot in the victim's data dir", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
		return len(m) > 0
	})
	if err := procs[victim].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := procs[victim].Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	file := damage(t, dir)

	// The damaged member refuses to start, naming the file and the repair.
	start(victim)
	code := procs[victim].Exit(t, 30*time.Second)
	out := procs[victim].Out.String()
	if code == 0 || !strings.Contains(out, file+" is damaged") || !strings.Contains(out, "coordrun ensemble remove") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, "goroutine ") {
		t.Errorf("a goroutine dump reached the member's output:\n%s", out)
	}

	// The repair, as the error says: remove the member, move its data
	// dir aside, start it empty with --join, add it back.
	other := sock((victim + 1) % 3)
	id := fmt.Sprint(victim + 1)
	admin := func(args ...string) {
		t.Helper()
		cmd := exec.Command(procBin, append(args, "--admin-socket", other)...)
		cmd.Env = procEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("coordrun %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	admin("ensemble", "remove", id)
	if err := os.Rename(dir, dir+".damaged"); err != nil {
		t.Fatal(err)
	}
	start(victim, "--join")
	admin("ensemble", "add", id, layout.PeerAddrs[victim])
	e.waitHealthy(60*time.Second, 0)
	vconn := testkit.DialZK(t, []string{layout.ClientAddrs[victim]}, 15*time.Second)
	if _, err := vconn.Sync("/"); err != nil {
		t.Fatal(err)
	}
	for _, p := range acked {
		if ok, _, err := vconn.Exists(p); err != nil || !ok {
			t.Fatalf("the repaired member lacks acknowledged %s: %v", p, err)
		}
	}
	if out := procs[victim].Out.String(); !strings.Contains(out, "snapshot") {
		t.Logf("repaired member's output:\n%s", out)
	}
}
