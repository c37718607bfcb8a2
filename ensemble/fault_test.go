package ensemble

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/raft"
)

// Fault tests: 3-member in-process ensembles losing and regaining members.
// Every wait is a poll with a deadline; nothing sleeps for a fixed time.

// --- a go-zookeeper client that tries one member first ---------------------

// faultHosts is a zk.HostProvider that tries first first, then the other
// servers in order, so a test decides which member a client starts on
// while the client can still fail over to the others like any client.
type faultHosts struct {
	first string

	mu      sync.Mutex
	servers []string
	curr    int
	last    int // index of the last server we connected to, -1 if none
}

func (h *faultHosts) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = []string{h.first}
	for _, s := range servers {
		if s != h.first {
			h.servers = append(h.servers, s)
		}
	}
	h.curr, h.last = -1, -1
	return nil
}

func (h *faultHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *faultHosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *faultHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// faultStateLog records every session state a client went through, with times;
// go-zookeeper drops events when its channel is full, a callback sees all.
type faultStateLog struct {
	mu  sync.Mutex
	evs []faultStateAt
}

type faultStateAt struct {
	at    time.Time
	state zk.State
}

func (l *faultStateLog) add(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	l.mu.Lock()
	l.evs = append(l.evs, faultStateAt{time.Now(), ev.State})
	l.mu.Unlock()
}

// since returns the states seen at or after t.
func (l *faultStateLog) since(t time.Time) []faultStateAt {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []faultStateAt
	for _, e := range l.evs {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// faultConnect opens a go-zookeeper session that tries servers[first] first
// and waits until it has a session there.
func faultConnect(t testing.TB, servers []string, first int, timeout time.Duration) (*zk.Conn, *faultStateLog) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		log := &faultStateLog{}
		conn, _, err := zk.Connect(servers, timeout,
			zk.WithLogger(testkit.QuietZK),
			zk.WithHostProvider(&faultHosts{first: servers[first]}),
			zk.WithEventCallback(log.add))
		if err != nil {
			t.Fatal(err)
		}
		faultWaitSession(conn, deadline)
		if conn.State() == zk.StateHasSession && conn.Server() == servers[first] {
			t.Cleanup(conn.Close)
			return conn, log
		}
		// The preferred member refused (a leader change under a loaded
		// machine, say) and the client went elsewhere: try again.
		got := conn.Server()
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no session on %s (last try ended on %s)", servers[first], got)
		}
	}
}

// --- a raw wire client that can go silent -----------------------------------

// faultRaw speaks the ZooKeeper protocol directly with ensemble/wire. It
// sends nothing unless told to, so it can stop pinging while its TCP
// connection stays open.
type faultRaw struct {
	t       testing.TB
	nc      net.Conn
	r       *bufio.Reader
	session int64
	timeout time.Duration
	xid     int32
}

func faultRawConnect(t testing.TB, addr string, timeout time.Duration) *faultRaw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &faultRaw{t: t, nc: nc, r: bufio.NewReader(nc)}
	req := wire.ConnectRequest{Timeout: int32(timeout / time.Millisecond), Passwd: make([]byte, 16)}
	if _, err := nc.Write(encodeFrame(&req)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := wire.ReadFrame(c.r, nil, 1<<20)
	if err != nil {
		t.Fatalf("raw connect to %s: %v", addr, err)
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(body)); err != nil || resp.SessionID == 0 {
		t.Fatalf("raw connect to %s: %+v %v", addr, resp, err)
	}
	c.session, c.timeout = resp.SessionID, time.Duration(resp.Timeout)*time.Millisecond
	return c
}

// send writes one request and returns its xid.
func (c *faultRaw) send(op int32, body wire.Record) (int32, error) {
	xid := wire.XidPing
	if op != wire.OpPing {
		c.xid++
		xid = c.xid
	}
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if body != nil {
		body.Encode(e)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.nc.Write(e.Frame())
	return xid, err
}

// readReply reads until the reply to xid, skipping notifications.
func (c *faultRaw) readReply(xid int32, deadline time.Time) (wire.ReplyHeader, *wire.Decoder, error) {
	_ = c.nc.SetReadDeadline(deadline)
	for {
		body, err := wire.ReadFrame(c.r, nil, 1<<20)
		if err != nil {
			return wire.ReplyHeader{}, nil, err
		}
		d := wire.NewDecoder(body)
		var h wire.ReplyHeader
		if err := h.Decode(d); err != nil {
			return h, nil, err
		}
		if h.Xid == xid {
			return h, d, nil
		}
		if h.Xid != wire.XidNotification {
			return h, d, fmt.Errorf("reply to xid %d while waiting for %d", h.Xid, xid)
		}
	}
}

// createEphemeral creates path as an ephemeral of the raw session.
func (c *faultRaw) createEphemeral(path string) {
	c.t.Helper()
	req := &wire.CreateRequest{
		Path:  path,
		Data:  []byte("raw"),
		ACL:   []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
		Flags: wire.FlagEphemeral,
	}
	xid, err := c.send(wire.OpCreate, req)
	if err != nil {
		c.t.Fatal(err)
	}
	h, d, err := c.readReply(xid, time.Now().Add(10*time.Second))
	if err != nil || h.Err != wire.OK {
		c.t.Fatalf("raw create %s: %+v %v", path, h, err)
	}
	var resp wire.CreateResponse
	if err := resp.Decode(d); err != nil || resp.Path != path {
		c.t.Fatalf("raw create %s: %q %v", path, resp.Path, err)
	}
}

// --- helpers ----------------------------------------------------------------

// others returns the indexes of running members other than skip.
func faultOthers(c *cluster, skip int) []int {
	var out []int
	for i := range c.N() {
		if i != skip && c.Running(i) {
			out = append(out, i)
		}
	}
	return out
}

func faultIndexOf(c *cluster, m *Member) int {
	for i := range c.N() {
		if c.Member(i) == m {
			return i
		}
	}
	return -1
}

// faultRetryable reports whether a client error means "try again": the outcome
// of the request is unknown or the connection is being re-established.
func faultRetryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.Is(err, zk.ErrClosing)
}

// faultWaitSession waits until conn has its session again or the deadline
// passes; it may run on any goroutine.
func faultWaitSession(conn *zk.Conn, deadline time.Time) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for conn.State() != zk.StateHasSession && time.Now().Before(deadline) {
		<-tick.C
	}
}

// faultTryCreate creates path, retrying through connection loss until the
// deadline. ErrNodeExists after a lost reply means an earlier attempt won.
func faultTryCreate(conn *zk.Conn, path string, data []byte, flags int32, deadline time.Time) error {
	uncertain := false
	for {
		_, err := conn.Create(path, data, flags, zk.WorldACL(zk.PermAll))
		if err == nil || (uncertain && errors.Is(err, zk.ErrNodeExists)) {
			return nil
		}
		if !faultRetryable(err) || time.Now().After(deadline) {
			return fmt.Errorf("create %s: %w", path, err)
		}
		uncertain = true
		faultWaitSession(conn, deadline)
	}
}

func faultCreate(t testing.TB, conn *zk.Conn, path string, data []byte, flags int32, deadline time.Time) {
	t.Helper()
	if err := faultTryCreate(conn, path, data, flags, deadline); err != nil {
		t.Fatal(err)
	}
}

// faultTrySet sets path from version to version+1, retrying through
// connection loss. A bad version after a lost reply is resolved by reading:
// if the node holds exactly this write, the earlier attempt won.
func faultTrySet(conn *zk.Conn, path string, data []byte, version int32, deadline time.Time) (*zk.Stat, error) {
	uncertain := false
	for {
		st, err := conn.Set(path, data, version)
		if err == nil {
			return st, nil
		}
		if uncertain && errors.Is(err, zk.ErrBadVersion) {
			got, st, gerr := conn.Get(path)
			if gerr == nil && string(got) == string(data) && st.Version == version+1 {
				return st, nil
			}
		}
		if !faultRetryable(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("set %s (version %d): %w", path, version, err)
		}
		uncertain = true
		faultWaitSession(conn, deadline)
	}
}

// faultTryDelete deletes path, retrying through connection loss.
func faultTryDelete(conn *zk.Conn, path string, deadline time.Time) error {
	uncertain := false
	for {
		err := conn.Delete(path, -1)
		if err == nil || (uncertain && errors.Is(err, zk.ErrNoNode)) {
			return nil
		}
		if !faultRetryable(err) || time.Now().After(deadline) {
			return fmt.Errorf("delete %s: %w", path, err)
		}
		uncertain = true
		faultWaitSession(conn, deadline)
	}
}

// faultTryGet reads path, retrying through connection loss.
func faultTryGet(conn *zk.Conn, path string, deadline time.Time) ([]byte, *zk.Stat, error) {
	for {
		data, st, err := conn.Get(path)
		if !faultRetryable(err) || time.Now().After(deadline) {
			return data, st, err
		}
		faultWaitSession(conn, deadline)
	}
}

// faultRead retries a read through connection loss.
func faultRead[T any](t testing.TB, conn *zk.Conn, what string, deadline time.Time, read func() (T, error)) T {
	t.Helper()
	for {
		v, err := read()
		if err == nil {
			return v
		}
		if !faultRetryable(err) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		faultWaitSession(conn, deadline)
	}
}

func faultExists(t testing.TB, conn *zk.Conn, path string) (bool, *zk.Stat) {
	t.Helper()
	type res struct {
		ok bool
		st *zk.Stat
	}
	r := faultRead(t, conn, "exists "+path, time.Now().Add(10*time.Second), func() (res, error) {
		ok, st, err := conn.Exists(path)
		return res{ok, st}, err
	})
	return r.ok, r.st
}

func faultSnapIndex(m *Member) uint64 {
	n, _ := strconv.ParseUint(m.raft.Stats()["last_snapshot_index"], 10, 64)
	return n
}

func faultFastSnapshots(cfg *Config) {
	cfg.SnapshotThreshold = 64
	cfg.SnapshotInterval = 100 * time.Millisecond
}

// faultSteadyRaft gives raft more slack than the harness default: a leader
// steps down after LeaderLeaseTimeout (half the heartbeat timeout) without
// a quorum, and with 300ms a scheduling stall of 150ms under -race on a
// busy 2-core machine deposes it. Failovers take a little longer with this.
func faultSteadyRaft(cfg *Config) {
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
}

// faultTakeovers records when members became leader, from raft's own
// state-change observations.
type faultTakeovers struct {
	mu  sync.Mutex
	ats []time.Time
}

func faultWatchTakeovers(t *testing.T, members ...*Member) *faultTakeovers {
	tk := &faultTakeovers{}
	ch := make(chan raft.Observation, 64)
	done := make(chan struct{})
	var obs []*raft.Observer
	for _, m := range members {
		o := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
			st, ok := o.Data.(raft.RaftState)
			return ok && st == raft.Leader
		})
		m.raft.RegisterObserver(o)
		obs = append(obs, o)
	}
	go func() {
		for {
			select {
			case <-ch:
				tk.mu.Lock()
				tk.ats = append(tk.ats, time.Now())
				tk.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		for i, m := range members {
			m.raft.DeregisterObserver(obs[i])
		}
		close(done)
	})
	return tk
}

// lastBefore returns the latest takeover before t.
func (tk *faultTakeovers) lastBefore(t time.Time) (time.Time, bool) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	var last time.Time
	for _, at := range tk.ats {
		if at.Before(t) && at.After(last) {
			last = at
		}
	}
	return last, !last.IsZero()
}

// faultLeaders tracks leadership changes seen by polling.
type faultLeaders struct {
	c       *cluster
	last    string
	changed time.Time
	changes int
}

func (l *faultLeaders) poll() {
	i := l.c.Leader()
	id := ""
	if i >= 0 {
		id = l.c.Member(i).ID()
	}
	if id != l.last {
		l.last, l.changed = id, time.Now()
		l.changes++
	}
}

// --- tests ------------------------------------------------------------------

// TestFaultLeaderKilled stops the leader under live clients: writes resume
// through the successor, sessions that keep pinging survive the change with
// their ephemerals, and sessions that went silent still expire about one
// timeout later.
func TestFaultLeaderKilled(t *testing.T) {
	c := startCluster(t, 3, faultSteadyRaft)
	servers := c.Servers()
	setupDeadline := time.Now().Add(10 * time.Second)

	// A pinging client starting on every member, each with an ephemeral.
	const liveTimeout = 4 * time.Second
	type live struct {
		home int
		conn *zk.Conn
		sid  int64
		eph  string
	}
	var clients []live
	for i := range servers {
		conn, _ := faultConnect(t, servers, i, liveTimeout)
		eph := fmt.Sprintf("/live-%d", i+1)
		faultCreate(t, conn, eph, nil, zk.FlagEphemeral, setupDeadline)
		clients = append(clients, live{i, conn, conn.SessionID(), eph})
	}

	// Two sessions that go silent while their TCP connections stay open:
	// one held by the leader that is about to die, one by a follower.
	lead := c.Leader()
	fol := faultOthers(c, lead)[0]
	const silentTimeout = 1500 * time.Millisecond
	rawL := faultRawConnect(t, servers[lead], silentTimeout)
	rawL.createEphemeral("/silent-on-leader")
	rawF := faultRawConnect(t, servers[fol], silentTimeout)
	rawF.createEphemeral("/silent-on-follower")
	for _, r := range []*faultRaw{rawF, rawL} {
		if r.timeout != silentTimeout {
			t.Fatalf("raw session timeout %v, want %v", r.timeout, silentTimeout)
		}
	}
	silentSince := time.Now()

	leadIdx := faultIndexOf(c, c.waitLeader()) // the leader now, should it have moved
	watcher := clients[faultOthers(c, leadIdx)[0]].conn
	var survivors []*Member
	for _, i := range faultOthers(c, leadIdx) {
		survivors = append(survivors, c.Member(i))
	}
	takeovers := faultWatchTakeovers(t, survivors...)
	c.Stop(leadIdx)
	stopped := time.Now()
	newLead := c.waitLeader()
	t.Logf("stopped leader %d; member %s leads %v later", leadIdx+1, newLead.ID(), time.Since(stopped).Round(time.Millisecond))

	// Writes resume through the new leader.
	faultCreate(t, watcher, "/after-failover", []byte("x"), 0, stopped.Add(10*time.Second))
	t.Logf("first write after the stop acknowledged %v after it", time.Since(stopped).Round(time.Millisecond))

	// The silent sessions expire: no earlier than their timeout (the new
	// leader grants every session a fresh one) and within a few seconds of
	// the last leader change (each new leader grants that grace again).
	leaders := &faultLeaders{c: c}
	stuck := false
	testkit.WaitFor(t, silentTimeout+12*time.Second, "the silent sessions' ephemerals to go", func() bool {
		leaders.poll()
		l, _ := faultExists(t, watcher, "/silent-on-leader")
		f, _ := faultExists(t, watcher, "/silent-on-follower")
		if !l && !f {
			return true
		}
		stuck = leaders.last != "" && time.Since(leaders.changed) > silentTimeout+4*time.Second
		return stuck
	})
	if stuck {
		t.Fatalf("member %s has led for %v, yet the silent sessions (timeout %v) still hold their ephemerals",
			leaders.last, time.Since(leaders.changed).Round(time.Millisecond), silentTimeout)
	}
	goneAt := time.Now()
	gone := goneAt.Sub(silentSince)
	took, ok := takeovers.lastBefore(goneAt)
	if !ok {
		t.Fatal("no member was seen taking over leadership")
	}
	t.Logf("silent sessions expired %v after going silent, %v after the last takeover (timeout %v, %d leader changes seen meanwhile)",
		gone.Round(time.Millisecond), goneAt.Sub(took).Round(time.Millisecond), silentTimeout, leaders.changes-1)
	if gone < silentTimeout*9/10 {
		t.Fatalf("silent sessions expired after %v, before their timeout %v", gone, silentTimeout)
	}
	// A new leader cannot know how recently its predecessor heard from a
	// session, so it grants each a full timeout from its takeover. The
	// slack covers the observer and poll delays; an expiry without the
	// grace comes within a few tens of milliseconds of the takeover.
	if since := goneAt.Sub(took); since < silentTimeout-500*time.Millisecond {
		t.Fatalf("silent sessions expired %v after a leader took over, before a full timeout (%v) of grace", since, silentTimeout)
	}

	// Every pinging session survived with the same id and its ephemeral,
	// including the one whose member was stopped.
	for _, cl := range clients {
		name := fmt.Sprintf("client starting on member %d", cl.home+1)
		testkit.WaitFor(t, 10*time.Second, name+" to have its session again", func() bool {
			return cl.conn.State() == zk.StateHasSession
		})
		if got := cl.conn.SessionID(); got != cl.sid {
			t.Fatalf("%s: session 0x%x became 0x%x", name, cl.sid, got)
		}
		ok, st := faultExists(t, watcher, cl.eph)
		if !ok || st.EphemeralOwner != cl.sid {
			t.Fatalf("%s: ephemeral %s: exists=%v stat=%+v, want owner 0x%x", name, cl.eph, ok, st, cl.sid)
		}
		// And the session can write again.
		faultCreate(t, cl.conn, cl.eph+"-after", nil, 0, time.Now().Add(10*time.Second))
		if cl.home == leadIdx && cl.conn.Server() == servers[leadIdx] {
			t.Fatalf("%s still talks to the stopped member", name)
		}
	}
	for _, p := range []string{"/silent-on-leader", "/silent-on-follower"} {
		if ok, _ := faultExists(t, watcher, p); ok {
			t.Fatalf("%s came back", p)
		}
	}
}

// faultPad appends n create txns to the raft log through the leader
// directly, one raft entry each (not grouped), batched by raft, to push
// the log past TrailingLogs quickly; the
// nodes /catch/pad-NNNN are real writes like any other. Proposals lost to
// a leader change are redone through the client.
func faultPad(t *testing.T, c *cluster, conn *zk.Conn, n int, deadline time.Time) {
	t.Helper()
	leader := c.waitLeader()
	futures := make([]leaderApply, n)
	for i := range futures {
		p := fmt.Sprintf("/catch/pad-%04d", i)
		txn := &tree.Txn{Kind: tree.TxnOps, Ops: []tree.Op{{
			Kind: tree.OpCreate, Path: p, Data: []byte(p),
			ACL: []tree.ACL{{Perms: tree.PermAll, Scheme: "world", ID: "anyone"}},
		}}}
		stamp(txn)
		data, err := txn.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = leaderApply{f: leader.raft.Apply(data, 0), proposed: time.Now()}
	}
	redo := 0
	for i, f := range futures {
		if _, err := leader.waitApply(f); err != nil {
			redo++
			// The lost proposal may have committed all the same.
			p := fmt.Sprintf("/catch/pad-%04d", i)
			if err := faultTryCreate(conn, p, []byte(p), 0, deadline); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	if redo > 0 {
		t.Logf("%d padding proposals lost to a leader change were redone", redo)
	}
}

// TestFaultRestartCatchUp stops a follower, writes enough for the other
// members to snapshot and compact their logs past the follower's last
// entry, restarts the follower, and checks that it catches up completely.
func TestFaultRestartCatchUp(t *testing.T) {
	c := startCluster(t, 3, faultFastSnapshots, faultSteadyRaft)
	servers := c.Servers()
	deadline := time.Now().Add(60 * time.Second) // a backstop; the test log shows real times

	setup := testkit.DialZK(t, servers, 4*time.Second)
	faultCreate(t, setup, "/catch", nil, 0, deadline)
	lead := c.Leader()
	fol := faultOthers(c, lead)[0]
	testkit.WaitFor(t, 5*time.Second, "the follower to apply /catch", func() bool {
		return c.Member(fol).LastZxid() >= c.Member(lead).LastZxid()
	})
	folLast := c.Member(fol).raft.LastIndex()
	c.Stop(fol)
	running := faultOthers(c, fol)

	// A few hundred client writes, pipelined over clients on both running
	// members, then enough raft entries that the log the follower needs is
	// compacted away (members keep 4096 entries behind a snapshot).
	const writers, perWriter = 8, 50
	const pads = 4300
	var conns []*zk.Conn
	for _, i := range running {
		conn, _ := faultConnect(t, servers, i, 4*time.Second)
		conns = append(conns, conn)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := conns[w%len(conns)]
			for i := 0; i < perWriter; i++ {
				p := fmt.Sprintf("/catch/w%02d-%04d", w, i)
				if err := faultTryCreate(conn, p, []byte(p), 0, deadline); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d client writes in %v", writers*perWriter, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	faultPad(t, c, setup, pads, deadline)
	t.Logf("%d padding writes in %v", pads, time.Since(start).Round(time.Millisecond))

	// Both running members snapshotted and dropped the log entries the
	// follower would need next, so whichever leads must send a snapshot.
	testkit.WaitFor(t, 10*time.Second, "the running members to compact their logs past the follower's last entry", func() bool {
		for _, i := range running {
			first, err := c.Member(i).store.FirstIndex()
			if err != nil || first <= folLast+1 {
				return false
			}
		}
		return true
	})
	var target int64
	for _, i := range running {
		target = max(target, c.Member(i).LastZxid())
	}

	c.Restart(t, fol)
	m := c.Member(fol)
	testkit.WaitFor(t, 15*time.Second, "the restarted follower to catch up", func() bool {
		return m.LastZxid() >= target
	})
	t.Logf("follower caught up from index %d to zxid %d (its snapshot index now %d)", folLast, m.LastZxid(), faultSnapIndex(m))

	// Reading from the restarted member after sync shows every write.
	reader := testkit.DialZK(t, []string{servers[fol]}, 4*time.Second)
	faultRead(t, reader, "sync", deadline, func() (string, error) { return reader.Sync("/catch") })
	kids := faultRead(t, reader, "children of /catch", deadline, func() ([]string, error) {
		kids, _, err := reader.Children("/catch")
		return kids, err
	})
	if want := writers*perWriter + pads; len(kids) != want {
		t.Fatalf("the restarted member lists %d children of /catch, want %d", len(kids), want)
	}
	start = time.Now()
	var rg sync.WaitGroup
	bad := make(chan string, 16)
	const readers = 16
	for r := 0; r < readers; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for i := r; i < len(kids); i += readers {
				p := "/catch/" + kids[i]
				data, st, err := faultTryGet(reader, p, deadline)
				if err != nil || string(data) != p || st.Version != 0 {
					bad <- fmt.Sprintf("restarted member: get %s: %q %+v %v", p, data, st, err)
					return
				}
			}
		}()
	}
	rg.Wait()
	close(bad)
	for b := range bad {
		t.Fatal(b)
	}
	t.Logf("read back %d nodes from the restarted member in %v", len(kids), time.Since(start).Round(time.Millisecond))
	for w := 0; w < writers; w++ {
		for i := 0; i < perWriter; i++ {
			p := fmt.Sprintf("/catch/w%02d-%04d", w, i)
			if !slices.Contains(kids, p[len("/catch/"):]) {
				t.Fatalf("restarted member lacks %s", p)
			}
		}
	}

	// The same tree as a running member once both applied the same prefix.
	other := c.Member(running[0])
	testkit.WaitFor(t, 5*time.Second, "the restarted follower and another member at the same zxid", func() bool {
		return m.LastZxid() == other.LastZxid()
	})
	m.fsm.mu.RLock()
	other.fsm.mu.RLock()
	za, zb := m.LastZxid(), other.LastZxid()
	same := za != zb || m.fsm.tree.Equal(other.fsm.tree)
	other.fsm.mu.RUnlock()
	m.fsm.mu.RUnlock()
	if !same {
		t.Fatalf("the restarted follower's tree differs from member %s's at zxid %d", other.ID(), za)
	}
}

// TestFaultFullRestart stops every member after a series of acknowledged
// writes and restarts them all from their data dirs: every acknowledged
// write is there with its data and stat.
func TestFaultFullRestart(t *testing.T) {
	c := startCluster(t, 3, faultFastSnapshots, faultSteadyRaft)
	conn := testkit.DialZK(t, c.Servers(), 4*time.Second)
	deadline := time.Now().Add(60 * time.Second) // a backstop

	type want struct {
		data    string
		version int32
	}
	acked := map[string]want{}
	var deleted []string
	faultCreate(t, conn, "/full", []byte("root"), 0, deadline)
	acked["/full"] = want{"root", 0}
	// Writers own disjoint keys; each key sees a create, up to three sets
	// with expected versions, and every tenth key a delete.
	const n, writers = 200, 8
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				p := fmt.Sprintf("/full/k%03d", i)
				v := fmt.Sprintf("v%d-0", i)
				if err := faultTryCreate(conn, p, []byte(v), 0, deadline); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[p] = want{v, 0}
				mu.Unlock()
				for j := 1; j <= i%4; j++ {
					v = fmt.Sprintf("v%d-%d", i, j)
					st, err := faultTrySet(conn, p, []byte(v), int32(j-1), deadline)
					if err == nil && st.Version != int32(j) {
						err = fmt.Errorf("set %s: version %d, want %d", p, st.Version, j)
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					acked[p] = want{v, st.Version}
					mu.Unlock()
				}
				if i%10 == 9 {
					if err := faultTryDelete(conn, p, deadline); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					delete(acked, p)
					deleted = append(deleted, p)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The full stat of every node as acknowledged, to compare after.
	stats := map[string]zk.Stat{}
	for p, w := range acked {
		type got struct {
			data []byte
			st   *zk.Stat
		}
		g := faultRead(t, conn, "get "+p, deadline, func() (got, error) {
			data, st, err := conn.Get(p)
			return got{data, st}, err
		})
		if string(g.data) != w.data || g.st.Version != w.version {
			t.Fatalf("before restart: %s = %q version %d, want %q version %d", p, g.data, g.st.Version, w.data, w.version)
		}
		stats[p] = *g.st
	}
	var snaps []uint64
	for _, m := range c.Members() {
		snaps = append(snaps, faultSnapIndex(m))
	}
	t.Logf("%d nodes, %d deleted, in %v; zxid %d; snapshot indexes %v",
		len(acked), len(deleted), time.Since(start).Round(time.Millisecond), c.Member(0).LastZxid(), snaps)
	conn.Close()

	for i := range c.N() {
		c.Stop(i)
	}
	for i := range c.N() {
		c.Restart(t, i)
	}
	c.waitLeader()

	for i := range c.N() {
		rc := testkit.DialZK(t, []string{c.cfgs[i].ClientAddr}, 4*time.Second)
		faultRead(t, rc, "sync", deadline, func() (string, error) { return rc.Sync("/full") })
		for p, w := range acked {
			type got struct {
				data []byte
				st   *zk.Stat
			}
			g := faultRead(t, rc, fmt.Sprintf("member %d after restart: get %s", i+1, p), deadline, func() (got, error) {
				data, st, err := rc.Get(p)
				return got{data, st}, err
			})
			if string(g.data) != w.data || g.st.Version != w.version {
				t.Fatalf("member %d after restart: %s = %q version %d, want %q version %d", i+1, p, g.data, g.st.Version, w.data, w.version)
			}
			if *g.st != stats[p] {
				t.Fatalf("member %d after restart: %s stat %+v, want %+v", i+1, p, *g.st, stats[p])
			}
		}
		for _, p := range deleted {
			if ok, _ := faultExists(t, rc, p); ok {
				t.Fatalf("member %d after restart: deleted %s is back", i+1, p)
			}
		}
		rc.Close()
	}
}

// TestFaultFollowerCutOffStopsExtendingLeases leaves a follower alone: it
// must stop answering its clients, since no leader acknowledges their
// liveness any more and a reply would be a false lease proof.
func TestFaultFollowerCutOffStopsExtendingLeases(t *testing.T) {
	c := startCluster(t, 3, faultSteadyRaft)
	servers := c.Servers()
	lead := c.Leader()
	fol := faultOthers(c, lead)[0]
	m := c.Member(fol)

	const timeout = 1500 * time.Millisecond
	// A go-zookeeper client that only knows this follower.
	conn, states := faultConnect(t, []string{servers[fol]}, 0, timeout)
	faultCreate(t, conn, "/cut", nil, zk.FlagEphemeral, time.Now().Add(10*time.Second))
	// And a raw client that pings on command.
	raw := faultRawConnect(t, servers[fol], timeout)
	xid, err := raw.send(wire.OpPing, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := raw.readReply(xid, time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("ping before the cut: %v", err)
	}

	// Cut the follower off: stop the other follower, then the leader.
	// Should the follower have become leader meanwhile, it steps down
	// within its lease and can never lead again alone. From then on no
	// leader exists that could acknowledge a ping.
	if m.IsLeader() {
		if err := m.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatalf("move leadership off the follower: %v", err)
		}
	}
	for _, i := range faultOthers(c, fol) {
		if !c.Member(i).IsLeader() {
			c.Stop(i)
		}
	}
	for _, i := range faultOthers(c, fol) {
		c.Stop(i)
	}
	testkit.WaitFor(t, 5*time.Second, "the cut-off member not to lead", func() bool { return !m.IsLeader() })
	cut := time.Now()

	// The raw client keeps pinging every third of its timeout for two
	// timeouts; not one reply may come back.
	replies := make(chan string, 16)
	readDone := make(chan error, 1)
	go func() {
		for {
			_ = raw.nc.SetReadDeadline(time.Now().Add(2*timeout + time.Second))
			body, err := wire.ReadFrame(raw.r, nil, 1<<20)
			if err != nil {
				readDone <- err
				return
			}
			var h wire.ReplyHeader
			_ = h.Decode(wire.NewDecoder(body))
			replies <- fmt.Sprintf("%+v", h)
		}
	}()
	tick := time.NewTicker(timeout / 3)
	defer tick.Stop()
	for pinging := true; pinging && time.Since(cut) < 2*timeout; {
		if _, err := raw.send(wire.OpPing, nil); err != nil {
			pinging = false // the member dropped the connection
		}
		select {
		case r := <-replies:
			t.Fatalf("cut-off follower answered a ping %v after the cut: %s", time.Since(cut), r)
		case err := <-readDone:
			t.Logf("cut-off follower closed the raw connection %v after the cut (%v)", time.Since(cut).Round(time.Millisecond), err)
			pinging = false
		case <-tick.C:
		}
	}
	select {
	case r := <-replies:
		t.Fatalf("cut-off follower answered a ping: %s", r)
	default:
	}

	// go-zookeeper notices the silence within its receive timeout (2/3 of
	// the session timeout) after its next ping, and does not get its
	// session back from the cut-off member.
	var disc time.Time
	testkit.WaitFor(t, 3*timeout, "the go-zookeeper client to be disconnected", func() bool {
		for _, e := range states.since(cut) {
			if e.state == zk.StateDisconnected {
				disc = e.at
				return true
			}
		}
		return false
	})
	t.Logf("go-zookeeper client disconnected %v after the cut", disc.Sub(cut).Round(time.Millisecond))
	until := time.Now().Add(2 * timeout)
	for time.Now().Before(until) {
		for _, e := range states.since(disc) {
			if e.state == zk.StateHasSession {
				t.Fatalf("client regained its session from a cut-off member %v after the cut", e.at.Sub(cut))
			}
		}
		<-tick.C
	}
	if conn.State() == zk.StateHasSession {
		t.Fatal("client regained its session from a cut-off member")
	}
}
