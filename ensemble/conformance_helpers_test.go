package ensemble

// Helpers for conformance_test.go: a go-zookeeper client that records every
// event it is handed, a raw ZooKeeper wire client built on ensemble/wire for
// the cases go-zookeeper cannot express (or validates away on the client),
// and small assertion helpers. Nothing here sleeps: every wait is bounded by
// a deadline.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// confSessionTimeout is what the go-zookeeper clients of the suite ask for:
// long enough that a loaded -race run never loses a session by accident.
const confSessionTimeout = 6 * time.Second

// confEnv is one ensemble shared by the subtests of one size.
type confEnv struct {
	c *cluster
	n int
}

// addr is member i's client address (i taken modulo the ensemble size, so
// "member 0, 1, 2" spreads clients over a 3-member ensemble and all land on
// the only member of a 1-member one).
func (e *confEnv) addr(i int) string { return e.c.cfgs[i%e.n].ClientAddr }

// client connects a go-zookeeper session to member i only.
func (e *confEnv) client(t testing.TB, i int) *zk.Conn {
	t.Helper()
	return dialZK(t, []string{e.addr(i)}, nil, false)
}

// dialZK connects a go-zookeeper session and waits until it has one. cb,
// when set, receives every event. Unless bigBuffers, go-zookeeper's send
// and receive buffers are cut from 1.5 MiB each to 256 KiB: the suite runs
// many clients at once.
func dialZK(t testing.TB, servers []string, cb func(zk.Event), bigBuffers bool) *zk.Conn {
	t.Helper()
	opts := []func(*zk.Conn){zk.WithEventCallback(cb)}
	if !bigBuffers {
		opts = append(opts, zk.WithMaxBufferSize(256<<10), zk.WithMaxConnBufferSize(256<<10))
	}
	return testkit.DialZK(t, servers, confSessionTimeout, opts...)
}

// recorder is a go-zookeeper client whose events are all recorded by the
// client's event callback. go-zookeeper calls it from its receive loop
// before it handles the next frame, so once a reply has been returned every
// notification the server sent ahead of that reply is in the log.
type recorder struct {
	*zk.Conn
	mu  sync.Mutex
	evs []zk.Event
}

func (e *confEnv) recorder(t testing.TB, i int) *recorder {
	t.Helper()
	return dialRecorder(t, []string{e.addr(i)})
}

func dialRecorder(t testing.TB, servers []string) *recorder {
	t.Helper()
	r := &recorder{}
	r.Conn = dialZK(t, servers, func(ev zk.Event) {
		r.mu.Lock()
		r.evs = append(r.evs, ev)
		r.mu.Unlock()
	}, false)
	return r
}

// count returns how many node events of type typ for path were delivered.
func (r *recorder) count(typ zk.EventType, path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.Type == typ && ev.Path == path {
			n++
		}
	}
	return n
}

// waitEvent waits for one watch event and checks its type and path.
func waitEvent(t testing.TB, ch <-chan zk.Event, typ zk.EventType, path string) zk.Event {
	t.Helper()
	if ch == nil {
		t.Fatalf("no watch channel for %s", path)
	}
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel for %s closed without an event", path)
		}
		if ev.Type != typ || ev.Path != path {
			t.Fatalf("watch event %v on %q (err %v), want %v on %q", ev.Type, ev.Path, ev.Err, typ, path)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v event for %s within 10s", typ, path)
	}
	return zk.Event{}
}

// noEvent fails if the watch already fired.
func noEvent(t testing.TB, ch <-chan zk.Event, what string) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("%s: unexpected watch event %v on %q", what, ev.Type, ev.Path)
	default:
	}
}

func mustCreate(t testing.TB, c *zk.Conn, path string, data []byte, flags int32) string {
	t.Helper()
	p, err := c.Create(path, data, flags, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	return p
}

func mustStat(t testing.TB, c *zk.Conn, path string) *zk.Stat {
	t.Helper()
	ok, st, err := c.Exists(path)
	if err != nil || !ok {
		t.Fatalf("exists %s: %v %v", path, ok, err)
	}
	return st
}

func mustExist(t testing.TB, c *zk.Conn, path string, want bool) {
	t.Helper()
	ok, _, err := c.Exists(path)
	if err != nil {
		t.Fatalf("exists %s: %v", path, err)
	}
	if ok != want {
		t.Fatalf("exists %s = %v, want %v", path, ok, want)
	}
}

func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err %v, want %v", what, err, want)
	}
}

// checkServing proves the member still serves: a fresh session creates,
// reads and deletes a node.
func (e *confEnv) checkServing(t testing.TB, i int, path string) {
	t.Helper()
	c := e.client(t, i)
	mustCreate(t, c, path, []byte("alive"), 0)
	data, _, err := c.Get(path)
	if err != nil || string(data) != "alive" {
		t.Fatalf("get %s after bad input: %q %v", path, data, err)
	}
	if err := c.Delete(path, -1); err != nil {
		t.Fatalf("delete %s: %v", path, err)
	}
	c.Close()
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// ---- raw wire client ----

var openACL = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}}

const rawMaxFrame = 4 << 20

// rawClient speaks the ZooKeeper protocol over its own socket, one request
// at a time.
type rawClient struct {
	t        testing.TB
	nc       net.Conn
	r        *bufio.Reader
	xid      int32
	lastZxid int64
	resp     wire.ConnectResponse
	// keepAlive: while waiting for a reply, ping this often, as a real
	// client does (a third of the session timeout), so that a slow reply
	// does not look like a silent client. Zero: never.
	keepAlive time.Duration
}

func rawDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// rawHandshake sends req on a new connection and reads the connect
// response. ok is false when the server closed the connection without
// one (as it does for a client that has seen a later zxid than it has).
func rawHandshake(t testing.TB, addr string, req wire.ConnectRequest) (c *rawClient, ok bool) {
	t.Helper()
	nc := rawDial(t, addr)
	c = &rawClient{t: t, nc: nc, r: bufio.NewReader(nc)}
	c.writeFrame(encodeFrame(&req))
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame, err := wire.ReadFrame(c.r, nil, rawMaxFrame)
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no connect response from %s within 10s", addr)
		}
		return c, false
	}
	if err := c.resp.Decode(wire.NewDecoder(frame)); err != nil {
		t.Fatalf("bad connect response: %v", err)
	}
	return c, true
}

// rawSession opens a new session with the given timeout.
func rawSession(t testing.TB, addr string, timeout time.Duration) *rawClient {
	t.Helper()
	c, ok := rawHandshake(t, addr, wire.ConnectRequest{Timeout: int32(timeout / time.Millisecond), Passwd: make([]byte, 16)})
	if !ok {
		t.Fatalf("%s refused a new session", addr)
	}
	if c.resp.SessionID == 0 || c.resp.Timeout <= 0 {
		t.Fatalf("new session refused: %+v", c.resp)
	}
	c.keepAlive = time.Duration(c.resp.Timeout) * time.Millisecond / 3
	return c
}

func (c *rawClient) writeFrame(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes one request and returns its xid.
func (c *rawClient) send(op int32, body wire.Record) int32 {
	c.t.Helper()
	c.xid++
	return c.sendXid(c.xid, op, body)
}

func (c *rawClient) sendXid(xid, op int32, body wire.Record) int32 {
	c.t.Helper()
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if body != nil {
		body.Encode(e)
	}
	c.writeFrame(e.Frame())
	return xid
}

// pingFrame is a complete ping request.
var pingFrame = func() []byte {
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: wire.XidPing, Opcode: wire.OpPing}).Encode(e)
	return e.Frame()
}()

// recv reads the reply to xid, skipping watch notifications (and the
// replies to keep-alive pings). err is set when the connection ended first.
func (c *rawClient) recv(xid int32) (wire.ReplyHeader, *wire.Decoder, error) {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	if c.keepAlive > 0 {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(c.keepAlive)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
					if _, err := c.nc.Write(pingFrame); err != nil {
						return
					}
				}
			}
		}()
		defer func() { close(stop); <-done }()
	}
	for {
		frame, err := wire.ReadFrame(c.r, nil, rawMaxFrame)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("no reply to xid %d within 15s", xid)
			}
			return wire.ReplyHeader{}, nil, err
		}
		d := wire.NewDecoder(frame)
		var h wire.ReplyHeader
		if err := h.Decode(d); err != nil {
			c.t.Fatalf("bad reply header: %v", err)
		}
		if h.Xid == wire.XidNotification || h.Xid == wire.XidPing && xid != wire.XidPing {
			continue
		}
		if h.Xid != xid {
			c.t.Fatalf("reply for xid %d, want %d", h.Xid, xid)
		}
		if h.Zxid > 0 {
			c.lastZxid = h.Zxid
		}
		return h, d, nil
	}
}

// call sends a request, waits for its reply and decodes the body into
// resp when the reply is OK.
func (c *rawClient) call(op int32, req, resp wire.Record) wire.Code {
	c.t.Helper()
	h, d, err := c.recv(c.send(op, req))
	if err != nil {
		c.t.Fatalf("op %s: connection ended: %v", wire.OpName(op), err)
	}
	if h.Err == wire.OK && resp != nil {
		if err := resp.Decode(d); err != nil {
			c.t.Fatalf("op %s: bad reply body: %v", wire.OpName(op), err)
		}
	}
	return h.Err
}

// ping sends a ping and checks its reply.
func (c *rawClient) ping() {
	c.t.Helper()
	h, _, err := c.recv(c.sendXid(wire.XidPing, wire.OpPing, nil))
	if err != nil {
		c.t.Fatalf("ping: connection ended: %v", err)
	}
	if h.Err != wire.OK {
		c.t.Fatalf("ping: err %v", h.Err)
	}
}

// expectClosed waits for the server to close nc: reads must end in EOF or
// a reset well before the deadline (discarding whatever comes first).
func expectClosed(t testing.TB, nc net.Conn, what string) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: server did not close the connection within 10s", what)
	}
	// io.Copy returns nil on EOF; any other error is a reset, also a close.
}

// fourLetter asks addr a four-letter word, failing the test on an error.
func fourLetter(t testing.TB, addr, word string) string {
	t.Helper()
	out, err := client.FourLetter(testkit.Context(t, 10*time.Second), addr, word, nil)
	if err != nil {
		t.Fatalf("%s: %v", word, err)
	}
	return out
}

// syncRead makes c's member catch up with the leader (sync), so a read that
// follows sees every write acknowledged before it.
func syncRead(t testing.TB, c *zk.Conn, path string) {
	t.Helper()
	if _, err := c.Sync(path); err != nil {
		t.Fatalf("sync %s: %v", path, err)
	}
}

// retry runs f until it returns nil, for writes that may meet a leader
// change; a write that happened but whose reply was lost is reported by f
// as nil (e.g. NodeExists for a create).
func retry(t testing.TB, what string, f func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	err := f()
	for err != nil && time.Now().Before(deadline) {
		<-tick.C
		err = f()
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func validMode(s string) bool {
	return s == "leader" || s == "follower" || s == "standalone"
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
