// Package chaos runs a coordrun ensemble of real processes behind
// controllable proxies, injects faults (kills, pauses, partitions, one-way
// drops, client cuts, disk rebuilds) while clients run a recorded
// workload, and checks the history: linearizability of writes and
// sync+reads, per-session order, watches, durability, ephemerals of dead
// sessions, and the replicated tree itself on every member.
//
// TestChaos runs a short round (3 members, 20s of faults) in every test
// run. A longer one:
//
//	COORDRUN_CHAOS_DURATION=5m COORDRUN_CHAOS_MEMBERS=5 go test -run Chaos -v -timeout 30m ./internal/chaos
//
// Every run prints its seed; COORDRUN_CHAOS_SEED repeats its fault
// schedule (the interleaving of the clients is up to the machine). When a
// check fails, the history (JSON lines) and, for linearizability,
// porcupine's visualization are kept in a chaos-failure-* directory next
// to the member logs, and the summary names it.
//
// The members need loopback addresses 127.0.0.11 and up (all of 127/8
// reaches lo on Linux): each member has its own, so that a proxy can tell
// from a connection's source which member opened it.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/internal/testkit"
)

// Config describes a cluster to start.
type Config struct {
	Bin     string    // the coordrun binary; "" means $COORDRUN_BIN, else built into Dir
	Dir     string    // data dirs and member logs go below it
	Members int       // 3 or 5 (default 3)
	Args    []string  // extra server flags, after the harness's own
	Log     io.Writer // harness progress; nil discards
	// DiskBytes, when set, puts every member's data dir on a tmpfs of
	// this size of its own (disk.go), which Fill can fill.
	DiskBytes int64
	// Failpoints: the binary is built with -tags failpoint, and
	// ArmFailpoints fails a member's writes (disk.go).
	Failpoints bool
}

// Cluster is a running ensemble. Member i has id i+1 and its own loopback
// IP, 127.0.0.(11+i), so the proxies can tell members apart by the source
// address of the connections they relay.
type Cluster struct {
	cfg     Config
	bin     string
	members []*member
	layout  testkit.ProcessEnsemble // the members' own addresses; peers dial the proxies
	sockDir string                  // the members' admin sockets: a short path, as Unix sockets need

	// mu guards the network policy below; procMu the processes.
	mu        sync.Mutex
	cut       [][]bool // cut[from][to]: bytes from → to are dropped
	clientCut []bool
	procMu    sync.Mutex
}

type member struct {
	idx                   int
	id, ip, dir, logPath  string
	sock                  string         // its admin socket, for membership changes and snapshots
	clientReal, peerReal  string         // where the process listens
	clientProxy, peerProx *testkit.Proxy // what clients and the other members dial
	proc                  *testkit.Process
	paused                bool
	join                  bool        // rebuilt: its data dir came from the others
	disk                  *diskHolder // its small filesystem, with Config.DiskBytes
}

// memberIP is member i's own loopback address; all of 127/8 reaches lo.
func memberIP(i int) string { return "127.0.0." + strconv.Itoa(11+i) }

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Log != nil {
		fmt.Fprintf(c.cfg.Log, "chaos: "+format+"\n", args...)
	}
}

// Start launches the members and waits until the ensemble is healthy.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Dir == "" {
		return nil, errors.New("chaos: Config.Dir is required")
	}
	c := &Cluster{cfg: cfg, bin: cfg.Bin}
	if c.bin == "" {
		b, err := testkit.Binary(cfg.Dir)
		if err != nil {
			return nil, err
		}
		c.bin = b
	}
	n := cfg.Members
	c.cut = make([][]bool, n)
	for i := range c.cut {
		c.cut[i] = make([]bool, n)
	}
	c.clientCut = make([]bool, n)
	ipIndex := map[string]int{}
	for i := 0; i < n; i++ {
		ipIndex[memberIP(i)] = i
	}
	source := func(a net.Addr) int {
		if ta, ok := a.(*net.TCPAddr); ok {
			if i, ok := ipIndex[ta.IP.String()]; ok {
				return i
			}
		}
		return -1
	}
	// Every client reaches a member through the fault proxy, from one
	// address: the per-address cap would count them all as one host, and
	// connections the proxy holds silent until their session ends would
	// count against the rest.
	secret, err := testkit.WriteSecretFile(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c.layout = testkit.ProcessEnsemble{Bin: c.bin, Args: append([]string{"--min-session-timeout", "2s", "--log-level", "warn", "--max-client-conns", "0"}, cfg.Args...), SecretFile: secret}
	sockDir, err := os.MkdirTemp("", "chaos")
	if err != nil {
		c.Close()
		return nil, err
	}
	c.sockDir = sockDir
	for i := 0; i < n; i++ {
		m := &member{idx: i, id: strconv.Itoa(i + 1), ip: memberIP(i)}
		m.sock = filepath.Join(sockDir, m.id+".sock")
		m.dir = filepath.Join(cfg.Dir, "member-"+m.id)
		m.logPath = filepath.Join(cfg.Dir, "member-"+m.id+".log")
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			c.Close()
			return nil, err
		}
		c.members = append(c.members, m)
		if cfg.DiskBytes > 0 {
			if m.disk, err = startHolder(m.dir, cfg.DiskBytes); err != nil {
				c.Close()
				return nil, err
			}
		}
		// The member binds them a moment later; nothing else on its
		// private address competes for them.
		addrs, err := testkit.FindFreeAddrs(m.ip, 2)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("chaos: loopback address %s: %w", m.ip, err)
		}
		m.clientReal, m.peerReal = addrs[0], addrs[1]
		idx := i
		m.clientProxy, err = testkit.NewProxy(testkit.ProxyConfig{Listen: net.JoinHostPort(m.ip, "0"), Target: m.clientReal,
			Drop: func(net.Addr, bool) bool { return c.clientsCut(idx) }})
		if err != nil {
			c.Close()
			return nil, err
		}
		m.peerProx, err = testkit.NewProxy(testkit.ProxyConfig{Listen: net.JoinHostPort(m.ip, "0"), Target: m.peerReal,
			Drop: func(src net.Addr, up bool) bool {
				if up {
					return c.blocked(source(src), idx)
				}
				return c.blocked(idx, source(src))
			}})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.layout.Dirs = append(c.layout.Dirs, m.dir)
		c.layout.ClientAddrs = append(c.layout.ClientAddrs, m.clientReal)
		c.layout.PeerAddrs = append(c.layout.PeerAddrs, m.peerReal)
		c.layout.PeerDial = append(c.layout.PeerDial, m.peerProx.Addr())
	}
	for _, m := range c.members {
		if err := c.startMember(m); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.logf("%d members up in %s", n, cfg.Dir)
	return c, nil
}

// startMember starts m's process and waits until its client port answers.
func (c *Cluster) startMember(m *member) error {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	if m.proc != nil {
		return fmt.Errorf("chaos: member %s is running", m.id)
	}
	extra := []string{"--admin-socket", m.sock}
	if m.join {
		extra = append(extra, "--join")
	}
	if err := os.MkdirAll(c.dataPath(m), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := c.memberCommand(m, c.layout.ServerArgs(m.idx, extra...))
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := testkit.StartProcess(cmd)
	logf.Close() // the member has its own copy
	if err != nil {
		return err
	}
	m.proc, m.paused = p, false
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, err := ask(m.clientReal, "ruok", time.Second); err == nil && out == "imok" {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("chaos: member %s exited at start (see %s)", m.id, m.logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: member %s does not answer on %s", m.id, m.clientReal)
		}
	}
}

func (c *Cluster) blocked(from, to int) bool {
	if from < 0 || to < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[from][to]
}

func (c *Cluster) clientsCut(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientCut[i]
}

func (c *Cluster) reconsider() {
	for _, m := range c.members {
		m.peerProx.Reconsider()
		m.clientProxy.Reconsider()
	}
}

// N is the number of members.
func (c *Cluster) N() int { return len(c.members) }

// Dir is the directory holding data dirs and member logs.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// Bin is the coordrun binary the members run.
func (c *Cluster) Bin() string { return c.bin }

// Servers is every member's client address through its proxy, comma-joined.
func (c *Cluster) Servers() string {
	var s []string
	for i := range c.members {
		s = append(s, c.ClientAddr(i))
	}
	return strings.Join(s, ",")
}

// ClientAddr is member i's client address through its proxy.
func (c *Cluster) ClientAddr(i int) string { return c.members[i].clientProxy.Addr() }

// DirectClientAddr is member i's own client port, which no fault cuts.
func (c *Cluster) DirectClientAddr(i int) string { return c.members[i].clientReal }

// IP is member i's own loopback address: the host of its client and peer
// addresses, and the source address of every connection it opens to
// another member.
func (c *Cluster) IP(i int) string { return c.members[i].ip }

// PeerAddr is member i's peer address through its proxy: what the other
// members dial, so also the source address of the bytes they receive from
// member i.
func (c *Cluster) PeerAddr(i int) string { return c.members[i].peerProx.Addr() }

// Running reports whether member i's process is up (paused counts as up).
func (c *Cluster) Running(i int) bool {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	return c.members[i].proc != nil
}

// Leader is the index of the member that reports itself leader, once
// exactly one reachable member does.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	for {
		leaders := c.leaders()
		if len(leaders) == 1 {
			return leaders[0], nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("chaos: no single leader (%v): %w", leaders, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) leaders() []int {
	var out []int
	for i, m := range c.members {
		if !c.Running(i) || c.isPaused(i) {
			continue
		}
		s, err := ask(m.clientReal, "srvr", time.Second)
		if err == nil && strings.Contains(s, "Mode: leader") {
			out = append(out, i)
		}
	}
	return out
}

func (c *Cluster) isPaused(i int) bool {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	return c.members[i].paused
}

// Kill sends SIGKILL to member i and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	c.procMu.Lock()
	m := c.members[i]
	p := m.proc
	c.procMu.Unlock()
	if p == nil {
		return nil
	}
	p.Kill()
	c.procMu.Lock()
	m.proc, m.paused = nil, false
	c.procMu.Unlock()
	m.clientProxy.Cut()
	m.peerProx.Cut()
	return nil
}

// Restart starts member i again on its data dir.
func (c *Cluster) Restart(i int) error { return c.startMember(c.members[i]) }

func (c *Cluster) signal(i int, sig syscall.Signal, paused bool) error {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	m := c.members[i]
	if m.proc == nil {
		return fmt.Errorf("chaos: member %s is not running", m.id)
	}
	if err := m.proc.Signal(sig); err != nil {
		return err
	}
	m.paused = paused
	return nil
}

// Pause freezes member i (SIGSTOP).
func (c *Cluster) Pause(i int) error { return c.signal(i, syscall.SIGSTOP, true) }

// Resume lets a paused member i run again (SIGCONT).
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT, false) }

// Partition cuts peer traffic, both ways, between members of different
// groups. Members named in no group form one more group together.
func (c *Cluster) Partition(groups ...[]int) {
	group := make([]int, len(c.members))
	for i := range group {
		group[i] = -1
	}
	for g, ms := range groups {
		for _, i := range ms {
			group[i] = g
		}
	}
	c.mu.Lock()
	for i := range c.cut {
		for j := range c.cut[i] {
			c.cut[i][j] = group[i] != group[j]
		}
	}
	c.mu.Unlock()
	c.reconsider()
}

// DropOneWay drops peer bytes from → to; to → from still pass.
func (c *Cluster) DropOneWay(from, to int) {
	c.mu.Lock()
	c.cut[from][to] = true
	c.mu.Unlock()
	c.reconsider()
}

// CutClients makes member i unreachable for clients (cut) or reachable
// again.
func (c *Cluster) CutClients(i int, cut bool) {
	c.mu.Lock()
	c.clientCut[i] = cut
	c.mu.Unlock()
	c.reconsider()
}

// Heal lifts every network fault.
func (c *Cluster) Heal() {
	c.mu.Lock()
	for i := range c.cut {
		for j := range c.cut[i] {
			c.cut[i][j] = false
		}
		c.clientCut[i] = false
	}
	c.mu.Unlock()
	c.reconsider()
}

// admin runs a coordrun client command against the members other than
// skip, on their admin sockets, until one succeeds.
func (c *Cluster) admin(ctx context.Context, skip int, args ...string) error {
	var last error
	for {
		for i, m := range c.members {
			if i == skip || !c.Running(i) || c.isPaused(i) {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			full := append(append([]string{}, args...), "--admin-socket", m.sock, "--timeout", "10s")
			out, err := exec.CommandContext(actx, c.bin, full...).CombinedOutput()
			cancel()
			if err == nil {
				return nil
			}
			last = fmt.Errorf("coordrun %s: %v: %s", strings.Join(full, " "), err, bytes.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %v (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// status is member i's `mbrs` answer.
func (c *Cluster) status(i int) (ensemble.Status, error) {
	var st ensemble.Status
	out, err := ask(c.members[i].clientReal, "mbrs", 8*time.Second)
	if err != nil {
		return st, err
	}
	err = json.Unmarshal([]byte(out), &st)
	return st, err
}

// WaitHealthy waits until every member runs, one leader has every member
// in its configuration, and every member has applied what the leader had
// committed when the wait began.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	var target uint64
	for {
		err := c.healthy(&target)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: ensemble not healthy: %v (%w)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(target *uint64) error {
	for i := range c.members {
		if !c.Running(i) || c.isPaused(i) {
			return fmt.Errorf("member %d is down or paused", i+1)
		}
	}
	leaders := c.leaders()
	if len(leaders) != 1 {
		return fmt.Errorf("leaders: %v", leaders)
	}
	st, err := c.status(leaders[0])
	if err != nil {
		return err
	}
	if len(st.Members) != len(c.members) {
		return fmt.Errorf("leader lists %d members", len(st.Members))
	}
	for _, ms := range st.Members {
		if ms.State == "leader" && *target == 0 {
			*target = ms.CommitIndex
		}
	}
	for _, ms := range st.Members {
		if ms.State != "leader" && ms.State != "follower" {
			return fmt.Errorf("member %s is %s %s", ms.ID, ms.State, ms.Error)
		}
		if ms.AppliedIndex < *target {
			return fmt.Errorf("member %s applied %d < %d", ms.ID, ms.AppliedIndex, *target)
		}
	}
	return nil
}

// Snapshot streams member i's whole tree, secrets included (the `snpf`
// word), from its admin socket. The member first catches up with the
// leader.
func (c *Cluster) Snapshot(i int) (int64, *tree.Tree, error) {
	out, err := ask(client.UnixPrefix+c.members[i].sock, "snpf", 30*time.Second)
	if err != nil {
		return 0, nil, err
	}
	if strings.HasPrefix(out, "error: ") {
		return 0, nil, errors.New(strings.TrimSpace(out))
	}
	return ensemble.ReadBackup(strings.NewReader(out))
}

// LogPath is member i's log file.
func (c *Cluster) LogPath(i int) string { return c.members[i].logPath }

// Close kills every member and stops the proxies.
func (c *Cluster) Close() {
	for i := range c.members {
		_ = c.Kill(i)
	}
	if c.sockDir != "" {
		os.RemoveAll(c.sockDir)
	}
	for _, m := range c.members {
		if m.clientProxy != nil {
			m.clientProxy.Close()
		}
		if m.peerProx != nil {
			m.peerProx.Close()
		}
		if m.disk != nil {
			m.disk.close()
		}
	}
}

// ask sends a four-letter word, allowing it d.
func ask(addr, word string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return client.FourLetter(ctx, addr, word, nil)
}
