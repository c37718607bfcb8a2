package testkit

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Timing of every member a test starts, in process or as a process,
// unless the test is about timing. Raft's heartbeat and election timeouts
// are generous: on a loaded machine under -race shorter ones depose
// leaders on their own, and each new leader grants every session a fresh
// timeout, which stretches what tests measure.
const (
	MinSessionTimeout = 500 * time.Millisecond
	HeartbeatTimeout  = time.Second
	ElectionTimeout   = time.Second
)

// RaftFlags are the server flags of the same raft timing.
func RaftFlags() []string {
	return []string{"--heartbeat-timeout", HeartbeatTimeout.String(), "--election-timeout", ElectionTimeout.String()}
}

// Logger is the log of the member or client named name: nothing, unless
// COORDRUN_TEST_LOG is set, then everything on stderr.
func Logger(name string) *slog.Logger {
	if os.Getenv("COORDRUN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", name)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Member is what a Cluster needs of an in-process member.
type Member interface {
	IsLeader() bool
	// WaitReady returns once the member knows a leader.
	WaitReady(ctx context.Context) error
	Close() error
}

// Peer is a member's raft id and peer address.
type Peer struct {
	ID   string
	Addr string
}

// MemberSpec is what a Cluster hands its start function for member Index:
// listeners already bound (on the same addresses again at a restart), a
// data dir that survives restarts, and every member's peer address.
type MemberSpec struct {
	Index                        int
	ID                           string // Index+1
	DataDir                      string
	PeerListener, ClientListener net.Listener
	ClientAddr, PeerAddr         string
	Peers                        []Peer
	Logger                       *slog.Logger
	// PeerSecret is the ensemble secret every member of the cluster
	// shares, fresh for each cluster: tests run with peers authenticated,
	// as members in production do.
	PeerSecret []byte
}

// ClusterConfig describes an in-process ensemble.
type ClusterConfig[M Member] struct {
	Members int
	// Start starts one member. It is called again for a restart.
	Start func(MemberSpec) (M, error)
	// LeaderOf, when set, names the leader member m follows; WaitLeader
	// then also waits until every running member names the same one.
	LeaderOf func(m M) string
	// Dir holds the data dirs of a LaunchCluster; "" is a new temporary
	// directory, removed by Close.
	Dir string
}

// Cluster is an in-process ensemble on loopback: real raft, real disks,
// real TCP. Its methods may be called from any goroutine.
type Cluster[M Member] struct {
	cfg    ClusterConfig[M]
	specs  []MemberSpec
	rmDir  string // removed by Close
	mu     sync.Mutex
	member []M
	up     []bool
}

// StartCluster starts the members in the test's temporary directory,
// waits for a leader, and closes them when the test ends.
func StartCluster[M Member](t testing.TB, cfg ClusterConfig[M]) *Cluster[M] {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := launch(cfg)
	if c != nil {
		t.Cleanup(c.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.WaitLeader(t)
	return c
}

// LaunchCluster starts the members for a fixture that outlives a single
// test, and waits until ctx ends for a leader; the caller closes it.
func LaunchCluster[M Member](ctx context.Context, cfg ClusterConfig[M]) (*Cluster[M], error) {
	rm := ""
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "coordrun-members-")
		if err != nil {
			return nil, err
		}
		cfg.Dir, rm = dir, dir
	}
	c, err := launch(cfg)
	if c == nil {
		if rm != "" {
			os.RemoveAll(rm)
		}
		return nil, err
	}
	c.rmDir = rm
	if err == nil {
		_, err = c.waitLeader(ctx)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// launch binds every member's listeners and starts the members; on an
// error it returns the cluster so far (to be closed), or nil.
func launch[M Member](cfg ClusterConfig[M]) (*Cluster[M], error) {
	n := cfg.Members
	c := &Cluster[M]{cfg: cfg, member: make([]M, n), up: make([]bool, n)}
	var peers []Peer
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.closeSpecs()
			return nil, err
		}
		cl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			pl.Close()
			c.closeSpecs()
			return nil, err
		}
		id := fmt.Sprint(i + 1)
		dir := filepath.Join(cfg.Dir, "member-"+id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			pl.Close()
			cl.Close()
			c.closeSpecs()
			return nil, err
		}
		c.specs = append(c.specs, MemberSpec{Index: i, ID: id, DataDir: dir, PeerListener: pl, ClientListener: cl,
			ClientAddr: cl.Addr().String(), PeerAddr: pl.Addr().String(), Logger: Logger("m" + id), PeerSecret: secret})
		peers = append(peers, Peer{ID: id, Addr: pl.Addr().String()})
	}
	for i := range c.specs {
		c.specs[i].Peers = peers
	}
	for i := range c.specs {
		m, err := cfg.Start(c.specs[i])
		if err != nil {
			for _, s := range c.specs[i:] {
				s.PeerListener.Close()
				s.ClientListener.Close()
			}
			return c, fmt.Errorf("starting member %d: %w", i+1, err)
		}
		c.set(i, m, true)
	}
	return c, nil
}

func (c *Cluster[M]) closeSpecs() {
	for _, s := range c.specs {
		s.PeerListener.Close()
		s.ClientListener.Close()
	}
}

func (c *Cluster[M]) set(i int, m M, up bool) {
	c.mu.Lock()
	c.member[i], c.up[i] = m, up
	c.mu.Unlock()
}

// N is the number of members, running or not.
func (c *Cluster[M]) N() int { return len(c.specs) }

// Member is member i, or the zero M while it is stopped.
func (c *Cluster[M]) Member(i int) M {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member[i]
}

// Running reports whether member i runs.
func (c *Cluster[M]) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up[i]
}

// Members are the running members.
func (c *Cluster[M]) Members() []M {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []M
	for i, m := range c.member {
		if c.up[i] {
			out = append(out, m)
		}
	}
	return out
}

// Spec is what member i was started with.
func (c *Cluster[M]) Spec(i int) MemberSpec { return c.specs[i] }

// ClientAddr is member i's client address.
func (c *Cluster[M]) ClientAddr(i int) string { return c.specs[i].ClientAddr }

// Servers is every member's client address, running or not.
func (c *Cluster[M]) Servers() []string {
	var s []string
	for _, spec := range c.specs {
		s = append(s, spec.ClientAddr)
	}
	return s
}

// LiveServers is the client address of every running member.
func (c *Cluster[M]) LiveServers() []string {
	var s []string
	for i, spec := range c.specs {
		if c.Running(i) {
			s = append(s, spec.ClientAddr)
		}
	}
	return s
}

// Index is the index of the member whose client address is addr, or -1.
func (c *Cluster[M]) Index(addr string) int {
	for i, spec := range c.specs {
		if spec.ClientAddr == addr {
			return i
		}
	}
	return -1
}

// Leader is the index of a running member that leads, or -1.
func (c *Cluster[M]) Leader() int {
	for i := range c.specs {
		if c.Running(i) && c.Member(i).IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until every running member knows the leader and
// returns the leader's index.
func (c *Cluster[M]) WaitLeader(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	i, err := c.waitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func (c *Cluster[M]) waitLeader(ctx context.Context) (int, error) {
	for _, m := range c.Members() {
		if err := m.WaitReady(ctx); err != nil {
			return -1, fmt.Errorf("no leader known to every member: %w", err)
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if i := c.agreedLeader(); i >= 0 {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader known to every running member: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// agreedLeader is the leading member's index once exactly one member
// leads and, with LeaderOf, every running member names the same leader.
func (c *Cluster[M]) agreedLeader() int {
	leader, seen := -1, ""
	for i := range c.specs {
		if !c.Running(i) {
			continue
		}
		m := c.Member(i)
		if c.cfg.LeaderOf != nil {
			id := c.cfg.LeaderOf(m)
			if id == "" || (seen != "" && id != seen) {
				return -1
			}
			seen = id
		}
		if m.IsLeader() {
			if leader >= 0 {
				return -1
			}
			leader = i
		}
	}
	return leader
}

// Stop closes member i; its data dir stays for a restart.
func (c *Cluster[M]) Stop(i int) {
	c.mu.Lock()
	m, up := c.member[i], c.up[i]
	var zero M
	c.member[i], c.up[i] = zero, false
	c.mu.Unlock()
	if up {
		m.Close()
	}
}

// Restart starts the stopped member i again on its data dir and its old
// addresses, waiting for the ports to be free again.
func (c *Cluster[M]) Restart(t testing.TB, i int) {
	t.Helper()
	spec := c.specs[i]
	var err error
	WaitFor(t, 5*time.Second, "ports free again", func() bool {
		var pl, cl net.Listener
		if pl, err = net.Listen("tcp", spec.PeerAddr); err != nil {
			return false
		}
		if cl, err = net.Listen("tcp", spec.ClientAddr); err != nil {
			pl.Close()
			return false
		}
		spec.PeerListener, spec.ClientListener = pl, cl
		return true
	})
	m, err := c.cfg.Start(spec)
	if err != nil {
		t.Fatalf("restarting member %d: %v", i+1, err)
	}
	c.set(i, m, true)
}

// Close stops every member.
func (c *Cluster[M]) Close() {
	for i := range c.specs {
		c.Stop(i)
	}
	if c.rmDir != "" {
		os.RemoveAll(c.rmDir)
	}
}
