package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// TestDiskFull fills the data dir's filesystem (a 24 MiB tmpfs of the
// member's own, no root needed) of a follower, of the leader, and of all
// three while a client writes. A full member raises its alarm (status,
// naming the data dir and its free space) and says so in its log; while
// a quorum has space every write succeeds; with every disk full, writes
// fail and none is acknowledged; once space is freed the alarms clear and
// every member catches up without a repair, and every acknowledged write
// is there.
func TestDiskFull(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Bin: testBin, Dir: dir, Log: testLog{t}, DiskBytes: 24 << 20})
	if err != nil {
		if strings.Contains(err.Error(), "namespace of its own") {
			t.Skipf("no small filesystem without root here: %v", err)
		}
		t.Fatal(err)
	}
	defer c.Close()
	var servers []string
	for i := 0; i < c.N(); i++ {
		servers = append(servers, c.DirectClientAddr(i))
	}
	conn := testkit.DialZK(t, servers, 10*time.Second)
	if _, err := conn.Create("/disk", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	var acked []string
	next := 0
	data := make([]byte, 512)
	// write creates the next znode; ok says whether it was acknowledged.
	write := func() bool {
		next++
		p := fmt.Sprintf("/disk/n%08d", next)
		_, err := conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
		if err == nil {
			acked = append(acked, p)
		}
		return err == nil
	}
	alarmed := func(i int) bool {
		st, err := c.status(i)
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == c.members[i].id {
				return len(m.Alarms) > 0 && strings.Contains(m.Alarms[0], c.members[i].dir)
			}
		}
		return false
	}
	saysFull := func(i int) bool {
		b, _ := os.ReadFile(c.LogPath(i))
		return strings.Contains(string(b), "data dir is full") && strings.Contains(string(b), "data_dir="+c.members[i].dir) &&
			strings.Contains(string(b), "free_bytes=")
	}
	// fullPhase fills who's disks and writes until each says it is full.
	fullPhase := func(name string, who []int, quorum bool) {
		t.Helper()
		for _, i := range who {
			if err := c.Fill(i); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		failed := 0
		for {
			if !write() {
				failed++
			}
			all := true
			for _, i := range who {
				// With every disk full there is no leader; a member's
				// alarm may then be seen only by the member itself
				// (status asks the others over the peer port, and
				// elections come and go): its log says it.
				all = all && (alarmed(i) || !quorum && saysFull(i))
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no disk-full alarm on members %v after 60s of writes", name, plusOne(who))
			}
		}
		for _, i := range who {
			if !saysFull(i) {
				b, _ := os.ReadFile(c.LogPath(i))
				t.Fatalf("%s: member %d's log does not say its data dir is full:\n%s", name, i+1, b)
			}
		}
		if quorum {
			// A quorum has space: writes go on (one may fail while a full
			// leader steps down).
			ok := 0
			for n := 0; n < 50; n++ {
				if write() {
					ok++
				}
			}
			if ok < 45 {
				t.Fatalf("%s: %d of 50 writes succeeded with a quorum that has space", name, ok)
			}
		} else if write() {
			t.Fatalf("%s: a write was acknowledged with every disk full", name)
		}
		t.Logf("%s: alarms raised; %d writes refused meanwhile, %d acknowledged in all", name, failed, len(acked))
		for _, i := range who {
			if err := c.Unfill(i); err != nil {
				t.Fatal(err)
			}
		}
		// Space is back: writes succeed, alarms clear, every member has
		// caught up.
		deadline = time.Now().Add(60 * time.Second)
		for {
			ok := write()
			clear := true
			for _, i := range who {
				clear = clear && !alarmed(i)
			}
			hctx, hcancel := context.WithTimeout(ctx, time.Second)
			herr := c.WaitHealthy(hctx)
			hcancel()
			if ok && clear && herr == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not recovered 60s after space was freed: write %v, alarms clear %v, %v", name, ok, clear, herr)
			}
		}
	}
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := (l + 1) % c.N()
	fullPhase("follower", []int{f}, true)
	if l, err = c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	fullPhase("leader", []int{l}, true)
	fullPhase("all", []int{0, 1, 2}, false)

	// No acknowledged write is lost, and every member holds the same.
	zx, trees, err := settledTrees(ctx, c, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v := Trees(zx, trees); len(v) > 0 {
		t.Fatalf("trees differ: %v", v)
	}
	for _, p := range acked {
		if _, err := trees[0].Exists(p); err != nil {
			t.Fatalf("acknowledged %s lost: %v", p, err)
		}
	}
}
