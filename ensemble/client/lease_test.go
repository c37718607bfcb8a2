package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
)

func TestLeaseKeeperMath(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLeaseKeeper(nil)
	if !l.get().IsZero() {
		t.Fatal("fresh lease not zero")
	}
	steps := []struct {
		sent    time.Duration
		timeout time.Duration
		want    time.Duration
		grew    bool
	}{
		{0, 3 * time.Second, 3 * time.Second, true},
		{time.Second, 3 * time.Second, 4 * time.Second, true},
		{500 * time.Millisecond, 3 * time.Second, 4 * time.Second, false}, // an older packet answered late
		{time.Second, 3 * time.Second, 4 * time.Second, false},            // equal is no increase
		{2 * time.Second, time.Second, 4 * time.Second, false},            // a shorter timeout after renegotiation
		{2 * time.Second, 5 * time.Second, 7 * time.Second, true},
	}
	for i, s := range steps {
		got, grew := l.prove(t0.Add(s.sent), s.timeout)
		if !got.Equal(t0.Add(s.want)) || grew != s.grew {
			t.Fatalf("step %d: lease %v grew %v, want %v %v", i, got.Sub(t0), grew, s.want, s.grew)
		}
	}
	// Undelivered updates coalesce to the latest.
	select {
	case v := <-l.ch:
		if !v.Equal(t0.Add(7 * time.Second)) {
			t.Fatalf("update %v", v.Sub(t0))
		}
	default:
		t.Fatal("no update")
	}
	select {
	case v := <-l.ch:
		t.Fatalf("second update %v", v)
	default:
	}
}

// fakeClock is a settable clock for lease math.
type fakeClock struct{ ns atomic.Int64 }

func (f *fakeClock) now() time.Time                   { return time.Unix(0, f.ns.Load()) }
func (f *fakeClock) set(t time.Time)                  { f.ns.Store(t.UnixNano()) }
func (f *fakeClock) add(d time.Duration)              { f.ns.Add(int64(d)) }
func leaseAt(t0 time.Time, d time.Duration) time.Time { return t0.Add(d) }

// scriptedServer answers the handshake with a 3s timeout, pings, and
// getData: "/missing" is NoNode, "/notify" is preceded by a notification.
func scriptedServer(t *testing.T, sid int64) *fakeServer {
	return newFakeServer(t, func(c net.Conn) {
		if _, err := fakeHandshake(c, sid, 3000); err != nil {
			return
		}
		fakeRequests(c, func(h wire.RequestHeader, d *wire.Decoder) bool {
			switch h.Opcode {
			case wire.OpGetData:
				var req wire.PathWatchRequest
				req.Decode(d)
				switch req.Path {
				case "/missing":
					fakeReply(c, h.Xid, 7, wire.ErrNoNode, nil)
				case "/notify":
					fakeReply(c, wire.XidNotification, -1, wire.OK, &wire.WatcherEvent{Type: wire.EventNodeDataChanged, State: wire.StateSyncConnected, Path: "/notify"})
					fakeReply(c, h.Xid, 8, wire.OK, &wire.GetDataResponse{Data: []byte("n")})
				default:
					fakeReply(c, h.Xid, 5, wire.OK, &wire.GetDataResponse{Data: []byte("x")})
				}
			case wire.OpCloseSession:
				fakeReply(c, h.Xid, 9, wire.OK, nil)
				return false
			default:
				fakeReply(c, h.Xid, 0, wire.ErrUnimplemented, nil)
			}
			return true
		})
	})
}

// With an injected clock the lease is exactly the latest send stamp of an
// answered packet plus the negotiated timeout.
func TestLeaseInjectedClock(t *testing.T) {
	srv := scriptedServer(t, 0x42)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var clk fakeClock
	clk.set(t0)
	c := connect(t, []string{srv.Addr()}, 3*time.Second, func(cfg *Config) { cfg.Now = clk.now })
	ctx := testkit.Context(t, 10*time.Second)
	const T = 3 * time.Second
	if c.SessionTimeout() != T {
		t.Fatalf("timeout %v", c.SessionTimeout())
	}
	if got := c.Lease(); !got.Equal(leaseAt(t0, T)) {
		t.Fatalf("after connect: lease %v, want t0+3s", got.Sub(t0))
	}

	clk.add(10 * time.Second)
	_, _, err := c.Get(ctx, "/a")
	must(t, err)
	if got := c.Lease(); !got.Equal(leaseAt(t0, 13*time.Second)) {
		t.Fatalf("after get: lease t0+%v, want t0+13s", got.Sub(t0))
	}

	// The clock going back makes no proof older than the lease count.
	clk.set(t0.Add(5 * time.Second))
	_, _, err = c.Get(ctx, "/a")
	must(t, err)
	if got := c.Lease(); !got.Equal(leaseAt(t0, 13*time.Second)) {
		t.Fatalf("after an older proof: lease t0+%v", got.Sub(t0))
	}
	select {
	case v := <-c.LeaseUpdates():
		if !v.Equal(leaseAt(t0, 13*time.Second)) {
			t.Fatalf("lease update t0+%v", v.Sub(t0))
		}
	default:
		t.Fatal("no lease update")
	}

	// An error reply proves liveness too; a notification proves nothing.
	clk.set(t0.Add(20 * time.Second))
	if _, _, err := c.Get(ctx, "/missing"); !errors.Is(err, wire.ErrNoNode) {
		t.Fatal(err)
	}
	if got := c.Lease(); !got.Equal(leaseAt(t0, 23*time.Second)) {
		t.Fatalf("after an error reply: lease t0+%v", got.Sub(t0))
	}
	if c.LastZxid() != 7 {
		t.Fatalf("last zxid %d", c.LastZxid())
	}
	_, _, ch, err := c.GetW(ctx, "/notify")
	must(t, err)
	noEvent(t, ch) // the notification came before the watch was armed
	if got := c.Lease(); !got.Equal(leaseAt(t0, 23*time.Second)) {
		t.Fatalf("after a notification: lease t0+%v", got.Sub(t0))
	}
	// The closeSession reply proves nothing.
	clk.set(t0.Add(time.Minute))
	must(t, c.Close())
	if got := c.Lease(); !got.Equal(leaseAt(t0, 23*time.Second)) {
		t.Fatalf("after close: lease t0+%v", got.Sub(t0))
	}
}

// The lease never runs ahead of what the server was shown: for every lease
// value L a caller observes at time p, some client frame reached the server
// at or after L - timeout and before p (measured by a relay in between,
// outside the client). Also, from the client's side, every increase is
// exactly an answered packet's send stamp plus the timeout.
func leasePropertySuite(t *testing.T, server string, members int) {
	ctx := testkit.Context(t, 60*time.Second)
	px := testkit.StartProxy(t, server)
	type proof struct {
		sent, lease, at time.Time
		timeout         time.Duration
	}
	var mu sync.Mutex
	var proofs []proof
	c := connect(t, []string{px.Addr()}, 2*time.Second, func(cfg *Config) {
		cfg.PingInterval = 20 * time.Millisecond
		cfg.hooks = &testHooks{onProof: func(sent time.Time, timeout time.Duration, lease time.Time) {
			mu.Lock()
			proofs = append(proofs, proof{sent: sent, lease: lease, at: time.Now(), timeout: timeout})
			mu.Unlock()
		}}
	})
	T := c.SessionTimeout()
	root := fmt.Sprintf("/lease-%x", c.SessionID())
	_, err := c.Create(ctx, root, nil, 0, OpenACL)
	must(t, err)

	// Load: pipelined writes and reads, while pings run.
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				p := fmt.Sprintf("%s/w%d-%d", root, w, i)
				if _, err := c.Create(ctx, p, nil, 0, OpenACL); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := c.Get(ctx, p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	type observed struct {
		lease, at time.Time
	}
	var seen []observed
	for len(seen) < 60 {
		select {
		case l := <-c.LeaseUpdates():
			seen = append(seen, observed{l, time.Now()})
			seen = append(seen, observed{c.Lease(), time.Now()})
		case <-ctx.Done():
			t.Fatalf("only %d lease updates", len(seen))
		}
	}
	wg.Wait()

	frames := px.FrameTimes()
	for i, o := range seen {
		// the latest frame forwarded before the observation
		k := sort.Search(len(frames), func(j int) bool { return frames[j].After(o.at) }) - 1
		if k < 0 || frames[k].Before(o.lease.Add(-T)) {
			t.Fatalf("observation %d: lease %v is beyond anything the server was shown (latest frame %v before)", i, o.lease, frames[max(k, 0)])
		}
		if i > 0 && o.lease.Before(seen[i-1].lease) {
			t.Fatalf("lease went back: %v then %v", seen[i-1].lease, o.lease)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var prev time.Time
	for i, p := range proofs {
		want := prev
		if c := p.sent.Add(p.timeout); c.After(want) {
			want = c
		}
		if !p.lease.Equal(want) || p.timeout != T || p.sent.After(p.at) {
			t.Fatalf("proof %d: sent %v timeout %v lease %v (prev %v)", i, p.sent, p.timeout, p.lease, prev)
		}
		prev = p.lease
	}
	t.Logf("%d proofs, %d observations, %d frames, %d members", len(proofs), len(seen), len(frames), members)
}

func TestLeaseProperty(t *testing.T) {
	cl := ensembletest.Start(t, 3)
	// Through a follower, whose replies wait for the leader's
	// acknowledgement, and through the leader.
	for i, s := range cl.Servers() {
		t.Run(fmt.Sprint("member", i+1), func(t *testing.T) { leasePropertySuite(t, s, 3) })
	}
}

// A reply whose xid is not the oldest outstanding request's is a protocol
// violation: the connection is dropped, the request fails with connection
// loss, and the session resumes on a new connection.
func TestReplyOutOfOrder(t *testing.T) {
	var conns atomic.Int32
	srv := newFakeServer(t, func(c net.Conn) {
		n := conns.Add(1)
		req, err := fakeHandshake(c, 0x77, 3000)
		if err != nil {
			return
		}
		if n > 1 && req.SessionID != 0x77 {
			return
		}
		fakeRequests(c, func(h wire.RequestHeader, _ *wire.Decoder) bool {
			if n == 1 {
				fakeReply(c, h.Xid+100, 1, wire.OK, &wire.GetDataResponse{})
			} else {
				fakeReply(c, h.Xid, 1, wire.OK, &wire.GetDataResponse{Data: []byte("ok")})
			}
			return true
		})
	})
	c := connect(t, []string{srv.Addr()}, 3*time.Second)
	ctx := testkit.Context(t, 10*time.Second)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	_, _, err := c.Get(ctx, "/x")
	if !errors.Is(err, ErrConnectionLoss) {
		t.Fatalf("out-of-order reply: %v", err)
	}
	if ev := awaitState(t, events, StateSuspended, 5*time.Second); !errors.Is(ev.Err, ErrProtocol) {
		t.Fatalf("suspended because %v", ev.Err)
	}
	awaitState(t, events, StateConnected, 5*time.Second)
	data, _, err := c.Get(ctx, "/x")
	if err != nil || string(data) != "ok" || c.SessionID() != 0x77 {
		t.Fatalf("after reconnect: %q %v", data, err)
	}
}

// A server that closes without answering the handshake (it is behind the
// client) makes a new client try the next one.
func TestHandshakeRefusedTriesNext(t *testing.T) {
	refusing := newFakeServer(t, func(c net.Conn) { wire.ReadFrame(c, nil, 1<<20) })
	good := scriptedServer(t, 0x55)
	for i := 0; i < 4; i++ { // the order is shuffled; try both orders likely
		c := connect(t, []string{refusing.Addr(), good.Addr()}, 3*time.Second)
		if ev := <-c.Events(); ev.Server != good.Addr() || c.SessionID() != 0x55 {
			t.Fatalf("connected to %s session %x", ev.Server, c.SessionID())
		}
		must(t, c.Close())
	}
}

// An existing session answered with timeout 0 has expired; a connection
// closed without answer is only a reason to try again.
func TestHandshakeExpired(t *testing.T) {
	var conns atomic.Int32
	srv := newFakeServer(t, func(c net.Conn) {
		switch conns.Add(1) {
		case 1:
			fakeHandshake(c, 0x99, 3000) // then drop it
		case 2:
			wire.ReadFrame(c, nil, 1<<20) // refuse without an answer
		default:
			frame, err := wire.ReadFrame(c, nil, 1<<20)
			if err != nil {
				return
			}
			var req wire.ConnectRequest
			req.Decode(wire.NewDecoder(frame))
			e := wire.NewFrameEncoder(nil)
			(&wire.ConnectResponse{Passwd: make([]byte, 16), HasReadOnly: true}).Encode(e)
			c.Write(e.Frame())
		}
	})
	c := connect(t, []string{srv.Addr()}, 3*time.Second)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("expiry not noticed")
	}
	if !errors.Is(c.Err(), ErrSessionExpired) || conns.Load() < 3 {
		t.Fatalf("err %v after %d connections", c.Err(), conns.Load())
	}
	var states []State
	for ev := range c.Events() {
		states = append(states, ev.State)
	}
	if fmt.Sprint(states) != fmt.Sprint([]State{StateConnected, StateSuspended, StateExpired}) {
		t.Fatalf("states %v", states)
	}
}

// Auth that the server rejects fails Connect.
func TestConnectAuthFailed(t *testing.T) {
	srv := newFakeServer(t, func(c net.Conn) {
		if _, err := fakeHandshake(c, 0x11, 3000); err != nil {
			return
		}
		fakeRequests(c, func(h wire.RequestHeader, _ *wire.Decoder) bool {
			if h.Opcode == wire.OpAuth {
				fakeReply(c, wire.XidAuth, 0, wire.ErrAuthFailed, nil)
				return false
			}
			fakeReply(c, h.Xid, 0, wire.OK, nil)
			return true
		})
	})
	_, err := Connect(testkit.Context(t, 5*time.Second), Config{Servers: []string{srv.Addr()}, Auth: []Auth{{Scheme: "nope", Secret: []byte("x")}}})
	if !errors.Is(err, wire.ErrAuthFailed) {
		t.Fatalf("connect with bad auth: %v", err)
	}
}

func TestContextCancelled(t *testing.T) {
	cl := ensembletest.Start(t, 1)
	c := connect(t, cl.Servers(), 4*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.Get(ctx, "/"); !errors.Is(err, context.Canceled) {
		t.Fatalf("get with cancelled ctx: %v", err)
	}
	if _, _, err := c.Get(testkit.Context(t, 5*time.Second), "/"); err != nil {
		t.Fatal(err)
	}
}
