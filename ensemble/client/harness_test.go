package client

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// connect opens a client; tweak adjusts its Config. It is closed when the
// test ends.
func connect(t testing.TB, servers []string, timeout time.Duration, tweak ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Servers: servers, SessionTimeout: timeout, Logger: testkit.Logger("client")}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := Connect(testkit.Context(t, 20*time.Second), cfg)
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

// fakeServer speaks just enough of the protocol to misbehave on purpose:
// each accepted connection is handed to serve.
type fakeServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

func newFakeServer(t testing.TB, serve func(net.Conn)) *fakeServer {
	f := &fakeServer{ln: testkit.Listen(t)}
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

func (f *fakeServer) Addr() string { return f.ln.Addr().String() }

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

// fakeRequests reads requests from c until that fails, answering pings
// and handing every other request to handle; handle returning false ends
// it.
func fakeRequests(c net.Conn, handle func(h wire.RequestHeader, d *wire.Decoder) bool) {
	for {
		h, d, err := fakeRequest(c)
		if err != nil {
			return
		}
		if h.Opcode == wire.OpPing {
			fakeReply(c, wire.XidPing, 0, wire.OK, nil)
		} else if !handle(h, d) {
			return
		}
	}
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
