package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// cluster is an in-process coordrun ensemble on loopback: real raft, real
// bolt files, real TCP (the equivalent of ensemble/harness_test.go, which
// this package cannot import).
type cluster struct {
	t       *testing.T
	members []*ensemble.Member
	cfgs    []ensemble.Config
}

func testLogger(t testing.TB, name string) *slog.Logger {
	if os.Getenv("COORDRUN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("who", name)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startCluster starts n members and waits until every one knows a leader.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var peers []ensemble.Peer
	var pls, cls []net.Listener
	for i := 0; i < n; i++ {
		pl, cl := listen(t), listen(t)
		pls, cls = append(pls, pl), append(cls, cl)
		peers = append(peers, ensemble.Peer{ID: fmt.Sprint(i + 1), Addr: pl.Addr().String()})
	}
	for i := 0; i < n; i++ {
		c.cfgs = append(c.cfgs, ensemble.Config{
			ID:                fmt.Sprint(i + 1),
			DataDir:           t.TempDir(),
			PeerListener:      pls[i],
			ClientListener:    cls[i],
			ClientAddr:        cls[i].Addr().String(),
			Peers:             peers,
			MinSessionTimeout: 500 * time.Millisecond,
			HeartbeatTimeout:  time.Second, // shorter ones flap under -race on a loaded machine
			ElectionTimeout:   time.Second,
			Logger:            testLogger(t, fmt.Sprint("m", i+1)),
		})
	}
	for i := range c.cfgs {
		m, err := ensemble.Start(c.cfgs[i])
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

// waitLeader waits until every running member knows a leader and one of
// them is it.
func (c *cluster) waitLeader() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, m := range c.members {
		if m != nil {
			if err := m.WaitReady(ctx); err != nil {
				c.t.Fatalf("member %s: no leader: %v", m.ID(), err)
			}
		}
	}
	waitFor(c.t, 15*time.Second, "a leader", func() bool {
		for _, m := range c.members {
			if m != nil && m.IsLeader() {
				return true
			}
		}
		return false
	})
}

func (c *cluster) stop(i int) {
	c.members[i].Close()
	c.members[i] = nil
}

func (c *cluster) servers() []string {
	var s []string
	for _, cfg := range c.cfgs {
		s = append(s, cfg.ClientAddr)
	}
	return s
}

func (c *cluster) liveServers() []string {
	var s []string
	for i, cfg := range c.cfgs {
		if c.members[i] != nil {
			s = append(s, cfg.ClientAddr)
		}
	}
	return s
}

func (c *cluster) indexOf(addr string) int {
	for i, cfg := range c.cfgs {
		if cfg.ClientAddr == addr {
			return i
		}
	}
	c.t.Fatalf("%s is not a member", addr)
	return -1
}

// waitFor polls cond until it holds or d passes.
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

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a client; tweak adjusts its Config. It is closed when the
// test ends.
func connect(t testing.TB, servers []string, timeout time.Duration, tweak ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Servers: servers, SessionTimeout: timeout, Logger: testLogger(t, "client")}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := Connect(ctxT(t, 20*time.Second), cfg)
	if err != nil {
		t.Fatalf("connect %v: %v", servers, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// awaitState reads events until one with state want arrives.
func awaitState(t testing.TB, events <-chan StateEvent, want State, d time.Duration) StateEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("events closed while waiting for %v", want)
			}
			if ev.State == want {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no %v event within %v", want, d)
		}
	}
}

// awaitEvent waits for a watch delivery.
func awaitEvent(t testing.TB, ch <-chan Event, d time.Duration) Event {
	t.Helper()
	if ch == nil {
		t.Fatal("nil watch channel")
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev := <-ch:
		return ev
	case <-timer.C:
		t.Fatalf("no watch event within %v", d)
	}
	return Event{}
}

// noEvent asserts that nothing was delivered on ch (yet).
func noEvent(t testing.TB, ch <-chan Event) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected watch event %+v", ev)
	default:
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// proxy is a TCP relay between clients and one server that a test can
// cut, hold, slow down, silence or refuse, and that timestamps every
// client frame it forwards.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   []net.Conn
	refuse  bool
	hold    chan struct{} // non-nil: server-to-client bytes wait until closed
	silent  chan struct{} // non-nil: nothing goes through, either way, until closed
	trap    bool          // silence falls when the next client frame comes
	delay   time.Duration // added to every server-to-client chunk
	frames  []time.Time   // when each client frame was forwarded
	wg      sync.WaitGroup
	stopped bool
	done    chan struct{}
}

func newProxy(t testing.TB, target string) *proxy {
	p := &proxy{t: t, ln: listen(t), target: target, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.stopped {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.clientToServer(c, s)
		go p.serverToClient(s, c)
	}
}

// quiet waits while the proxy is silent.
func (p *proxy) quiet() {
	p.mu.Lock()
	ch := p.silent
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *proxy) clientToServer(c, s net.Conn) {
	defer p.wg.Done()
	// Not even a close goes through a silence.
	defer func() { p.quiet(); s.Close() }()
	var buf []byte
	for {
		frame, err := wire.ReadFrame(c, buf, 64<<20)
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.trap {
			p.trap = false
			if p.silent == nil {
				p.silent = make(chan struct{})
			}
		}
		p.mu.Unlock()
		p.quiet()
		p.mu.Lock()
		p.frames = append(p.frames, time.Now())
		p.mu.Unlock()
		if _, err := s.Write(wire.AppendFrame(nil, frame)); err != nil {
			return
		}
		buf = frame[:0]
	}
}

type chunk struct {
	b  []byte
	at time.Time // when it came from the server
}

func (p *proxy) serverToClient(s, c net.Conn) {
	defer p.wg.Done()
	defer func() { p.quiet(); c.Close() }()
	// A reader takes the server's bytes as they come, so that a delay
	// applies to each chunk from its own arrival, not one after another.
	q := make(chan chunk, 1024)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	broken := false
	for ch := range q {
		if broken {
			continue // drain, so that the reader ends
		}
		p.mu.Lock()
		hold, delay := p.hold, p.delay
		p.mu.Unlock()
		if d := time.Until(ch.at.Add(delay)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-p.done:
			}
			t.Stop()
		}
		if hold != nil {
			<-hold
		}
		p.quiet()
		if _, err := c.Write(ch.b); err != nil {
			broken = true
			s.Close()
		}
	}
}

// cut closes every relayed connection.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	hold := p.hold
	p.hold = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if hold != nil {
		close(hold)
	}
}

// silence makes the member behind the proxy fall silent as it does behind
// a firewall that drops its packets: connections stay open, new ones are
// accepted, and not a byte nor a close goes through, either way, until
// speak.
func (p *proxy) silence() {
	p.mu.Lock()
	if p.silent == nil {
		p.silent = make(chan struct{})
	}
	p.mu.Unlock()
}

// silenceOnNextFrame makes the silence fall as the next client frame
// arrives, before it goes on.
func (p *proxy) silenceOnNextFrame() {
	p.mu.Lock()
	p.trap = true
	p.mu.Unlock()
}

func (p *proxy) isSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent != nil
}

// speak ends a silence. The connections that lived through it are closed
// and what they held is dropped, as TCP resets a connection whose other
// end has given up on it meanwhile; new connections work.
func (p *proxy) speak() {
	p.mu.Lock()
	conns, ch := p.conns, p.silent
	p.conns, p.silent = nil, nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if ch != nil {
		close(ch)
	}
}

// setDelay makes every later server-to-client chunk wait d after it came.
func (p *proxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *proxy) setRefuse(v bool) {
	p.mu.Lock()
	p.refuse = v
	p.mu.Unlock()
}

func (p *proxy) holdReplies() {
	p.mu.Lock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *proxy) frameCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.frames)
}

func (p *proxy) frameTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.frames...)
}

func (p *proxy) close() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.ln.Close()
	p.speak()
	p.cut()
	close(p.done)
	p.wg.Wait()
}

// fakeServer speaks just enough of the protocol to misbehave on purpose:
// each accepted connection is handed to serve.
type fakeServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

func newFakeServer(t testing.TB, serve func(net.Conn)) *fakeServer {
	f := &fakeServer{ln: listen(t)}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := f.ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { f.ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeServer) addr() string { return f.ln.Addr().String() }

// fakeHandshake reads a ConnectRequest and grants session sid.
func fakeHandshake(c net.Conn, sid int64, timeout int32) (*wire.ConnectRequest, error) {
	frame, err := wire.ReadFrame(c, nil, 1<<20)
	if err != nil {
		return nil, err
	}
	var req wire.ConnectRequest
	if err := req.Decode(wire.NewDecoder(frame)); err != nil {
		return nil, err
	}
	e := wire.NewFrameEncoder(nil)
	(&wire.ConnectResponse{Timeout: timeout, SessionID: sid, Passwd: make([]byte, 16), HasReadOnly: req.HasReadOnly}).Encode(e)
	_, err = c.Write(e.Frame())
	return &req, err
}

// fakeRequest reads one request header.
func fakeRequest(c net.Conn) (wire.RequestHeader, *wire.Decoder, error) {
	frame, err := wire.ReadFrame(c, nil, 1<<20)
	if err != nil {
		return wire.RequestHeader{}, nil, err
	}
	d := wire.NewDecoder(frame)
	var h wire.RequestHeader
	if err := h.Decode(d); err != nil {
		return h, nil, err
	}
	return h, d, nil
}

func fakeReply(c net.Conn, xid int32, zxid int64, code wire.Code, body wire.Record) error {
	e := wire.NewFrameEncoder(nil)
	(&wire.ReplyHeader{Xid: xid, Zxid: zxid, Err: code}).Encode(e)
	if body != nil {
		body.Encode(e)
	}
	_, err := c.Write(e.Frame())
	return err
}
