package ensemble

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// cluster is an in-process ensemble on loopback with real raft, real bolt
// files and real TCP.
type cluster struct {
	t       *testing.T
	members []*Member
	cfgs    []Config
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("COORDRUN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startCluster starts n members and waits for a leader.
func startCluster(t *testing.T, n int, tweak ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var peers []Peer
	var pls, cls []net.Listener
	for i := 0; i < n; i++ {
		pl, cl := listen(t), listen(t)
		pls, cls = append(pls, pl), append(cls, cl)
		peers = append(peers, Peer{ID: fmt.Sprint(i + 1), Addr: pl.Addr().String()})
	}
	for i := 0; i < n; i++ {
		cfg := Config{
			ID:                fmt.Sprint(i + 1),
			DataDir:           t.TempDir(),
			PeerListener:      pls[i],
			ClientListener:    cls[i],
			ClientAddr:        cls[i].Addr().String(),
			Peers:             peers,
			MinSessionTimeout: 500 * time.Millisecond,
			// Generous for a loaded CI machine under -race: shorter
			// timeouts caused spurious elections there.
			HeartbeatTimeout: time.Second,
			ElectionTimeout:  time.Second,
			Logger:           testLogger(t).With("m", i+1),
		}
		for _, f := range tweak {
			f(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	for i := range c.cfgs {
		m, err := Start(c.cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
	}
	t.Cleanup(c.closeAll)
	c.waitLeader()
	return c
}

func (c *cluster) closeAll() {
	for i, m := range c.members {
		if m != nil {
			m.Close()
			c.members[i] = nil
		}
	}
}

// waitLeader waits until every running member knows the same leader.
func (c *cluster) waitLeader() *Member {
	c.t.Helper()
	var leader *Member
	waitFor(c.t, 10*time.Second, "a leader known to every running member", func() bool {
		leader = nil
		var seen string
		for _, m := range c.members {
			if m == nil {
				continue
			}
			_, id := m.raft.LeaderWithID()
			if id == "" || (seen != "" && string(id) != seen) {
				return false
			}
			seen = string(id)
			if m.IsLeader() {
				leader = m
			}
		}
		return leader != nil
	})
	return leader
}

// stop shuts member i down (its data dir stays).
func (c *cluster) stop(i int) {
	c.members[i].Close()
	c.members[i] = nil
}

// restart starts member i again from its data dir on its old addresses.
func (c *cluster) restart(i int) {
	c.t.Helper()
	cfg := c.cfgs[i]
	var err error
	waitFor(c.t, 5*time.Second, "ports free again", func() bool {
		var pl, cl net.Listener
		if pl, err = net.Listen("tcp", cfg.Peers[i].Addr); err != nil {
			return false
		}
		if cl, err = net.Listen("tcp", cfg.ClientAddr); err != nil {
			pl.Close()
			return false
		}
		cfg.PeerListener, cfg.ClientListener = pl, cl
		return true
	})
	m, err := Start(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.members[i] = m
}

func (c *cluster) servers() []string {
	var s []string
	for _, cfg := range c.cfgs {
		s = append(s, cfg.ClientAddr)
	}
	return s
}

func (c *cluster) leaderIndex() int {
	for i, m := range c.members {
		if m != nil && m.IsLeader() {
			return i
		}
	}
	return -1
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// connect opens a go-zookeeper session to the given servers and waits
// until it has a session.
func connect(t testing.TB, servers []string, timeout time.Duration) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, events
			}
		case <-ctx.Done():
			t.Fatalf("no session with %s", strings.Join(servers, ","))
		}
	}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...interface{}) {}
