package client

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// The stall check, on made-up send and arrival times.
func TestStallCheck(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type packet struct {
		op    int32
		wrote time.Duration
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		line    []packet      // outstanding, in wire order
		heard   time.Duration // bytes last arrived (0: with the handshake, at t0)
		thawed  time.Duration // 0: never frozen
		now     time.Duration
		stalled string        // the op named in the error; "" for none
		next    time.Duration // when not stalled
	}{
		{name: "idle", timeout: 6 * time.Second, now: ms(5000), next: ms(1000)},
		{name: "ping waiting", timeout: 6 * time.Second, line: []packet{{wire.OpPing, 0}}, now: ms(400), next: ms(600)},
		{name: "ping unanswered", timeout: 6 * time.Second, line: []packet{{wire.OpPing, 0}}, now: ms(1000), stalled: "ping"},
		{name: "bytes arriving", timeout: 6 * time.Second, line: []packet{{wire.OpPing, 0}}, heard: ms(500), now: ms(1200), next: ms(300)},
		{name: "read waiting", timeout: 6 * time.Second, line: []packet{{wire.OpGetData, 0}}, now: ms(1000), next: ms(500)},
		{name: "read unanswered", timeout: 6 * time.Second, line: []packet{{wire.OpGetData, 0}}, now: ms(1500), stalled: "getData"},
		{name: "write waiting", timeout: 6 * time.Second, line: []packet{{wire.OpSetData, 0}, {wire.OpPing, ms(200)}}, now: ms(1200), next: ms(300)},
		{name: "write unanswered", timeout: 6 * time.Second, line: []packet{{wire.OpSetData, 0}, {wire.OpPing, ms(200)}}, now: ms(1500), stalled: "setData"},
		{name: "ping before a write", timeout: 6 * time.Second, line: []packet{{wire.OpPing, 0}, {wire.OpSetData, ms(100)}}, now: ms(1000), stalled: "ping"},
		{name: "sync", timeout: 6 * time.Second, line: []packet{{wire.OpSync, 0}}, now: ms(1400), next: ms(100)},
		{name: "unknown op", timeout: 6 * time.Second, line: []packet{{999, 0}}, now: ms(1400), next: ms(100)},
		{name: "auth", timeout: 6 * time.Second, line: []packet{{wire.OpAuth, 0}}, now: ms(1000), stalled: "auth"},
		{name: "thawed", timeout: 6 * time.Second, line: []packet{{wire.OpPing, 0}}, thawed: ms(800), now: ms(1200), next: ms(600)},
		{name: "short timeout", timeout: 600 * time.Millisecond, line: []packet{{wire.OpPing, 0}}, now: ms(200), next: ms(550)},
		{name: "short timeout stalled", timeout: 600 * time.Millisecond, line: []packet{{wire.OpSetData, 0}}, now: ms(750), stalled: "setData"},
	} {
		cn := &conn{server: "m1", timeout: tc.timeout, heard: &heardReader{epoch: t0}}
		cn.heard.last.Store(int64(tc.heard))
		for _, p := range tc.line {
			switch p.op {
			case wire.OpPing:
				cn.pings = append(cn.pings, ping{wrote: at(p.wrote)})
			case wire.OpAuth:
				cn.auths = append(cn.auths, &request{op: p.op, wrote: at(p.wrote)})
			default:
				cn.pending = append(cn.pending, &request{op: p.op, wrote: at(p.wrote)})
			}
		}
		var since time.Time
		if tc.thawed > 0 {
			since = at(tc.thawed)
		}
		next, err := cn.checkStall(at(tc.now), since)
		switch {
		case tc.stalled != "":
			if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), " "+tc.stalled) {
				t.Errorf("%s: %v, want a stall on %s", tc.name, err, tc.stalled)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case next != tc.next:
			t.Errorf("%s: next check in %v, want %v", tc.name, next, tc.next)
		}
	}
}

// A write waits for a quorum round, and a ping behind it waits too: the
// client allows it longer than a ping before it gives up.
func TestStallWriteAllowance(t *testing.T) {
	const timeout = 6 * time.Second
	slow := (timeout/6 + timeout/4) / 2 // beyond a ping's allowance, within a write's
	var conns atomic.Int32
	srv := newFakeServer(t, func(c net.Conn) {
		conns.Add(1)
		if _, err := fakeHandshake(c, 0x61, int32(timeout/time.Millisecond)); err != nil {
			return
		}
		fakeRequests(c, func(h wire.RequestHeader, d *wire.Decoder) bool {
			switch h.Opcode {
			case wire.OpSetData:
				var req wire.SetDataRequest
				req.Decode(d)
				if req.Path == "/stuck" {
					// Nothing more is answered on this connection.
					io.Copy(io.Discard, c)
					return false
				}
				<-time.After(slow) // the write's commit
				fakeReply(c, h.Xid, 2, wire.OK, &wire.StatResponse{})
			case wire.OpCloseSession:
				fakeReply(c, h.Xid, 3, wire.OK, nil)
				return false
			default:
				fakeReply(c, h.Xid, 0, wire.ErrUnimplemented, nil)
			}
			return true
		})
	})
	c := connect(t, []string{srv.Addr()}, timeout, func(cfg *Config) { cfg.PingInterval = timeout / 5 })
	ctx := testkit.Context(t, 30*time.Second)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	for i := 0; i < 2; i++ {
		start := time.Now()
		if _, err := c.Set(ctx, "/slow", nil, -1); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < slow {
			t.Fatalf("slow write answered after %v", d)
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("state changed during slow writes: %+v", ev)
	default:
	}

	start := time.Now()
	if _, err := c.Set(ctx, "/stuck", nil, -1); !errors.Is(err, ErrConnectionLoss) {
		t.Fatalf("stuck write: %v", err)
	}
	ev := awaitState(t, events, StateSuspended, time.Second)
	gaveUp := time.Since(start)
	t.Logf("a write left unanswered was given up after %v", gaveUp.Round(time.Millisecond))
	if !errors.Is(ev.Err, errStalled) || !strings.Contains(ev.Err.Error(), "setData") {
		t.Fatalf("suspended because %v", ev.Err)
	}
	if gaveUp < timeout/4 || gaveUp > timeout/4+750*time.Millisecond {
		t.Fatalf("gave up after %v, want %v", gaveUp, timeout/4)
	}
	awaitState(t, events, StateConnected, 5*time.Second)
	if conns.Load() != 2 {
		t.Fatalf("%d connections", conns.Load())
	}
}

// An attempt to resume the session may take what is left of the lease,
// and a third of the timeout once little or nothing is left.
func TestAttemptWait(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var clk fakeClock
	c := bareClient(t, 6*time.Second)
	c.cfg.Now = clk.now
	c.lease.prove(t0, 6*time.Second) // lease t0+6s
	key := sessionKey{id: 1, timeout: 6 * time.Second}
	for _, tc := range []struct {
		now, want time.Duration
	}{
		{0, 6 * time.Second},
		{time.Second, 5 * time.Second},
		{4 * time.Second, 2 * time.Second},
		{5 * time.Second, 2 * time.Second},
		{time.Minute, 2 * time.Second},
		{-time.Minute, 6 * time.Second}, // a clock behind the lease's: no more than a timeout
	} {
		clk.set(t0.Add(tc.now))
		if got := c.attemptWait(key); got != tc.want {
			t.Errorf("at t0%+v: %v, want %v", tc.now, got, tc.want)
		}
	}
	// A new session has no lease: the old bound, two thirds of the
	// requested timeout and at least a dial timeout.
	if got := c.attemptWait(sessionKey{}); got != 4*time.Second {
		t.Errorf("new session: %v", got)
	}
	c.cfg.SessionTimeout = time.Second
	if got := c.attemptWait(sessionKey{}); got != c.cfg.DialTimeout {
		t.Errorf("new short session: %v", got)
	}
}

// bareClient is just enough of a Client to race handshakes with.
func bareClient(t *testing.T, timeout time.Duration) *Client {
	cfg, err := Config{Servers: []string{"unused:1"}, SessionTimeout: timeout, Logger: testkit.Logger("client")}.withDefaults()
	must(t, err)
	return &Client{cfg: cfg, log: cfg.Logger, lease: newLeaseKeeper(nil), watches: newWatchSet()}
}

// probe is a fake member that records when connections came and how they
// ended from its side.
type probe struct {
	*fakeServer
	mu       sync.Mutex
	accepted []time.Time
	ended    []error
}

// newProbe starts a fake member. It reads the ConnectRequest, then
// answers it by mode: "silent" (never), "grant" (resumes or creates
// session 0x42), "refuse" (closes), "expire" (says the session is gone).
// Then it reads until the client goes away.
func newProbe(t *testing.T, mode string) *probe {
	p := &probe{}
	p.fakeServer = newFakeServer(t, func(c net.Conn) {
		p.mu.Lock()
		p.accepted = append(p.accepted, time.Now())
		p.mu.Unlock()
		var err error
		switch mode {
		case "grant":
			_, err = fakeHandshake(c, 0x42, 2000)
		case "expire":
			if _, err = wire.ReadFrame(c, nil, 1<<20); err == nil {
				e := wire.NewFrameEncoder(nil)
				(&wire.ConnectResponse{Passwd: make([]byte, 16), HasReadOnly: true}).Encode(e)
				_, err = c.Write(e.Frame())
			}
		default:
			_, err = wire.ReadFrame(c, nil, 1<<20)
		}
		if err == nil && mode != "refuse" {
			_, err = io.Copy(io.Discard, c)
			if err == nil {
				err = io.EOF
			}
		}
		p.mu.Lock()
		p.ended = append(p.ended, err)
		p.mu.Unlock()
	})
	return p
}

func (p *probe) acceptedAt() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.accepted...)
}

func (p *probe) endings() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.ended...)
}

// waitReset waits until every connection p accepted has ended, and fails
// unless the client reset them.
func (p *probe) waitReset(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, "the abandoned attempt to end", func() bool { return len(p.endings()) == len(p.acceptedAt()) })
	for _, err := range p.endings() {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("abandoned connection ended with %v, want a reset", err)
		}
	}
}

var known = sessionKey{id: 0x42, passwd: make([]byte, 16), timeout: 2 * time.Second}

// An attempt that has not completed its handshake within the stagger gets
// company; the first to complete wins and the other is reset.
func TestRaceStagger(t *testing.T) {
	silent, good := newProbe(t, "silent"), newProbe(t, "grant")
	c := bareClient(t, 2*time.Second)
	stagger := c.stagger(known)
	start := time.Now()
	cn, pos, errs := c.race(testkit.Context(t, 10*time.Second), []string{silent.Addr(), good.Addr()}, known)
	if cn == nil || pos != 1 {
		t.Fatalf("winner %d, errors %v", pos, errs)
	}
	defer abandon(cn.raw)
	took := time.Since(start)
	s, g := silent.acceptedAt(), good.acceptedAt()
	if len(s) != 1 || len(g) != 1 {
		t.Fatalf("%d and %d connections", len(s), len(g))
	}
	gap := g[0].Sub(s[0])
	t.Logf("second attempt %v after the first (stagger %v); won after %v", gap.Round(time.Millisecond), stagger, took.Round(time.Millisecond))
	if gap < stagger*8/10 || took > stagger+500*time.Millisecond {
		t.Fatalf("second attempt %v after the first, won after %v; stagger %v", gap, took, stagger)
	}
	silent.waitReset(t)
}

// An attempt that fails starts the next one at once.
func TestRaceFailFast(t *testing.T) {
	refusing, good := newProbe(t, "refuse"), newProbe(t, "grant")
	c := bareClient(t, 10*time.Second)
	cn, pos, errs := c.race(testkit.Context(t, 10*time.Second), []string{refusing.Addr(), good.Addr()}, sessionKey{id: 0x42, passwd: make([]byte, 16), timeout: 10 * time.Second})
	if cn == nil || pos != 1 || len(errs) != 0 {
		t.Fatalf("winner %d, errors %v", pos, errs)
	}
	defer abandon(cn.raw)
	if gap := good.acceptedAt()[0].Sub(refusing.acceptedAt()[0]); gap > c.stagger(known)/2 {
		t.Fatalf("next attempt %v after a refusal; the stagger is %v", gap, c.stagger(known))
	}
}

// A member that says the session expired ends the race; attempts still
// running are reset, and no more are started.
func TestRaceExpired(t *testing.T) {
	silent, expiring, spare := newProbe(t, "silent"), newProbe(t, "expire"), newProbe(t, "grant")
	c := bareClient(t, 2*time.Second)
	cn, _, errs := c.race(testkit.Context(t, 10*time.Second), []string{silent.Addr(), expiring.Addr(), spare.Addr()}, known)
	if cn != nil || !slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, ErrSessionExpired) }) {
		t.Fatalf("race after an expired answer: %v %v", cn, errs)
	}
	silent.waitReset(t)
	if n := len(spare.acceptedAt()); n != 0 {
		t.Fatalf("%d attempts after the expired answer", n)
	}
	// Refusals are not expiry.
	refusing := newProbe(t, "refuse")
	cn, _, errs = c.race(testkit.Context(t, 10*time.Second), []string{refusing.Addr()}, known)
	if cn != nil || len(errs) != 1 || errors.Is(errs[0], ErrSessionExpired) || !errors.Is(errs[0], errRefused) {
		t.Fatalf("race after a refusal: %v %v", cn, errs)
	}
}

// Connect races for a new session too: a silent member in the list costs
// at most the stagger.
func TestConnectPastSilentMember(t *testing.T) {
	silent, good := newProbe(t, "silent"), newProbe(t, "grant")
	const timeout = 4 * time.Second
	for i := 0; i < 4; i++ { // the order is shuffled; both orders are likely
		start := time.Now()
		c, err := Connect(testkit.Context(t, 10*time.Second), Config{Servers: []string{silent.Addr(), good.Addr()}, SessionTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if c.SessionID() != 0x42 || c.currentServer() != good.Addr() {
			t.Fatalf("session %x on %s", c.SessionID(), c.currentServer())
		}
		if took > timeout/20+500*time.Millisecond {
			t.Fatalf("connect took %v", took)
		}
		c.cancel()
		<-c.ran
	}
	silent.waitReset(t)
}

// A connection that lost the race after creating a session closes it; one
// that resumed the session is just reset.
func TestDiscard(t *testing.T) {
	got := make(chan int32, 2)
	srv := newFakeServer(t, func(c net.Conn) {
		if _, err := fakeHandshake(c, 0x71, 3000); err != nil {
			return
		}
		h, _, err := fakeRequest(c)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				got <- -1
			}
			return
		}
		got <- h.Opcode
	})
	c := bareClient(t, 3*time.Second)
	for _, tc := range []struct {
		key  sessionKey
		want int32
	}{{sessionKey{}, wire.OpCloseSession}, {sessionKey{id: 0x71, passwd: make([]byte, 16), timeout: 3 * time.Second}, -1}} {
		cn, err := c.dial(testkit.Context(t, 5*time.Second), srv.Addr(), tc.key)
		must(t, err)
		cn.discard()
		select {
		case op := <-got:
			if op != tc.want {
				t.Fatalf("session %x: server saw %d, want %d", tc.key.id, op, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the server saw nothing")
		}
	}
}

// A request refused with SESSIONMOVED was not applied: the client
// reconnects, which moves the session back, and sends it again.
func TestSessionMovedResent(t *testing.T) {
	var conns, creates atomic.Int32
	srv := newFakeServer(t, func(c net.Conn) {
		n := conns.Add(1)
		req, err := fakeHandshake(c, 0x88, 3000)
		if err != nil || n > 1 && req.SessionID != 0x88 {
			return
		}
		fakeRequests(c, func(h wire.RequestHeader, d *wire.Decoder) bool {
			switch h.Opcode {
			case wire.OpCreate:
				creates.Add(1)
				var cr wire.CreateRequest
				cr.Decode(d)
				if n == 1 {
					fakeReply(c, h.Xid, 0, wire.ErrSessionMoved, nil)
					return true
				}
				fakeReply(c, h.Xid, 5, wire.OK, &wire.CreateResponse{Path: cr.Path})
			case wire.OpCloseSession:
				fakeReply(c, h.Xid, 6, wire.OK, nil)
				return false
			default:
				fakeReply(c, h.Xid, 0, wire.ErrUnimplemented, nil)
			}
			return true
		})
	})
	c := connect(t, []string{srv.Addr()}, 3*time.Second)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	p, err := c.Create(testkit.Context(t, 10*time.Second), "/moved", nil, 0, OpenACL)
	if err != nil || p != "/moved" {
		t.Fatalf("create: %q %v", p, err)
	}
	if ev := awaitState(t, events, StateSuspended, time.Second); !errors.Is(ev.Err, wire.ErrSessionMoved) {
		t.Fatalf("suspended because %v", ev.Err)
	}
	awaitState(t, events, StateConnected, time.Second)
	if creates.Load() != 2 || conns.Load() != 2 || c.SessionID() != 0x88 || c.State() != StateConnected {
		t.Fatalf("%d creates on %d connections, session %x %v", creates.Load(), conns.Load(), c.SessionID(), c.State())
	}
}
