package ensemble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A raft store written by a real member passes the start-up check; the
// same file with damaged meta pages is refused, by the check and by Start,
// with an error that names the file and the repair.
func TestDamagedStoreRefused(t *testing.T) {
	c := startCluster(t, 3)
	c.waitLeader()
	conn := testkit.DialZK(t, c.Servers(), 10*time.Second)
	for i := range 300 {
		if _, err := conn.Create(fmt.Sprintf("/n%03d", i), make([]byte, 200), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	victim := (c.Leader() + 1) % 3
	testkit.WaitFor(t, 10*time.Second, "the follower applied every write", func() bool {
		return c.Member(victim).fsm.lastZxid() >= c.Member(c.Leader()).fsm.lastZxid()
	})
	c.Stop(victim)
	path := filepath.Join(c.Spec(victim).DataDir, "raft.db")
	if err := CheckStore(path); err != nil {
		t.Fatalf("a healthy store fails its check: %v", err)
	}

	// Flip a byte in both meta pages (their checksums then fail), as a
	// torn write of the file's head would. Damage deeper in the file can
	// make bbolt panic on a goroutine of its own: the process test of
	// `coordrun server` covers that (TestServerRefusesDamagedStore).
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	b[40] ^= 0xff
	b[page+40] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	err = CheckStore(path)
	var de *DamagedStoreError
	if !errors.As(err, &de) || de.File != path {
		t.Fatalf("damaged store: check says %v", err)
	}
	cfg := c.cfgs[victim]
	cfg.PeerAddr, cfg.ClientAddr = c.Spec(victim).PeerAddr, c.Spec(victim).ClientAddr
	cfg.PeerListener, cfg.ClientListener = nil, nil
	m, err := Start(cfg)
	if err == nil {
		m.Close()
		t.Fatal("a member started from a damaged store")
	}
	if !errors.Is(err, ErrDamagedStore) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--join") {
		t.Errorf("start from a damaged store: %v", err)
	}
}

// A missing store (a new data dir) passes.
func TestCheckStoreMissingFile(t *testing.T) {
	if err := CheckStore(filepath.Join(t.TempDir(), "raft.db")); err != nil {
		t.Fatal(err)
	}
}
