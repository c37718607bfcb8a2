package testkit

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// echoServer echoes every connection's bytes back until it ends.
func echoServer(t *testing.T) string {
	ln := Listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends one frame and reads it back.
func roundTrip(t *testing.T, c net.Conn, body string) {
	t.Helper()
	frame := wire.AppendFrame(nil, []byte(body))
	if _, err := c.Write(frame); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(frame))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("echo of %q: %q, %v", body, got, err)
	}
}

// quietFor checks that nothing arrives on c within d and that c stays open.
func quietFor(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want silence", n, err)
	}
}

// closedSoon checks that c is closed (EOF or reset) within 5s.
func closedSoon(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection stayed open")
	}
}

func TestProxyCutAndRefuse(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	if p.FrameCount() != 1 || len(p.FrameTimes()) != 1 {
		t.Errorf("frames %d, times %v", p.FrameCount(), p.FrameTimes())
	}
	p.Cut()
	closedSoon(t, c)

	p.Refuse(true)
	closedSoon(t, dial(t, p.Addr()))
	p.Refuse(false)
	roundTrip(t, dial(t, p.Addr()), "again")
}

func TestProxyHoldAndDelay(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	p.Hold()
	if _, err := c.Write(wire.AppendFrame(nil, []byte("held"))); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "the frame to go up", func() bool { return p.FrameCount() == 1 })
	quietFor(t, c, 100*time.Millisecond)
	p.Cut()
	closedSoon(t, c)

	const delay = 200 * time.Millisecond
	p.Delay(delay)
	c = dial(t, p.Addr())
	start := time.Now()
	roundTrip(t, c, "slow")
	if took := time.Since(start); took < delay {
		t.Errorf("the echo came back after %v, within the delay of %v", took, delay)
	}
}

func TestProxySilence(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")
	p.SilenceOnNextFrame()
	if p.Silent() {
		t.Fatal("silent before the next frame")
	}
	if _, err := c.Write(wire.AppendFrame(nil, []byte("trapped"))); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "the silence to fall", p.Silent)
	quietFor(t, c, 100*time.Millisecond)
	if n := p.FrameCount(); n != 1 {
		t.Errorf("%d frames went up; the trapped one must not", n)
	}
	// A new connection is accepted and hears nothing either.
	late := dial(t, p.Addr())
	if _, err := late.Write(wire.AppendFrame(nil, []byte("late"))); err != nil {
		t.Fatal(err)
	}
	quietFor(t, late, 100*time.Millisecond)
	p.Speak()
	closedSoon(t, c)
	closedSoon(t, late)
	roundTrip(t, dial(t, p.Addr()), "after")
}

func TestProxyDrop(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "before")
	p.Drop(true)
	if !p.Dropping() {
		t.Fatal("not dropping")
	}
	if _, err := c.Write(wire.AppendFrame(nil, []byte("lost"))); err != nil {
		t.Fatal(err)
	}
	quietFor(t, c, 100*time.Millisecond)
	// The end of a stream is lost too: the other side is not told.
	other := dial(t, p.Addr())
	other.Close()
	late := dial(t, p.Addr())
	if _, err := late.Write(wire.AppendFrame(nil, []byte("late"))); err != nil {
		t.Fatal(err)
	}
	quietFor(t, late, 100*time.Millisecond)
	// Lifting it closes the streams that lost bytes.
	p.Drop(false)
	closedSoon(t, c)
	closedSoon(t, late)
	roundTrip(t, dial(t, p.Addr()), "after")
}

// The Drop function decides per direction and per source, as the chaos
// harness's partitions do; Reconsider closes what lost bytes once the
// path is open both ways.
func TestProxyDropFunc(t *testing.T) {
	var up, down atomic.Bool
	p, err := NewProxy(ProxyConfig{Target: echoServer(t), Drop: func(src net.Addr, toTarget bool) bool {
		if src.(*net.TCPAddr).IP.String() != "127.0.0.1" {
			t.Errorf("source %v", src)
		}
		if toTarget {
			return up.Load()
		}
		return down.Load()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c := dial(t, p.Addr())
	roundTrip(t, c, "open")
	down.Store(true) // the echo is lost on its way back
	if _, err := c.Write([]byte("one way")); err != nil {
		t.Fatal(err)
	}
	quietFor(t, c, 100*time.Millisecond)
	up.Store(true)
	p.Reconsider()
	quietFor(t, c, 50*time.Millisecond) // still cut: nothing is closed
	up.Store(false)
	down.Store(false)
	p.Reconsider()
	closedSoon(t, c)
	c = dial(t, p.Addr())
	if _, err := c.Write([]byte("whole")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len("whole"))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "whole" {
		t.Fatalf("echo after healing: %q, %v", got, err)
	}
}

// request is a frame that reads as a request header of xid and op, and,
// echoed, as a reply header of xid.
func request(xid, op int32) string {
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	(&wire.RequestHeader{}).Encode(e) // room for the reply header's zxid and error
	return string(e.Frame()[4:])
}

func TestProxyCutReplyTo(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "handshake")
	p.CutReplyTo(wire.OpCreate2)
	roundTrip(t, c, request(1, wire.OpGetData))
	if _, err := c.Write(wire.AppendFrame(nil, []byte(request(2, wire.OpCreate2)))); err != nil {
		t.Fatal(err)
	}
	closedSoon(t, c)
	if n := p.Cuts(); n != 1 {
		t.Fatalf("%d replies cut, want 1", n)
	}
	c = dial(t, p.Addr())
	roundTrip(t, c, "handshake")
	roundTrip(t, c, request(3, wire.OpCreate2)) // disarmed by the cut
}

func TestProxyHoldReplyTo(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	roundTrip(t, c, "handshake")
	held, release := p.HoldReplyTo(wire.OpCreate2)
	defer release()
	if _, err := c.Write(wire.AppendFrame(nil, []byte(request(1, wire.OpCreate2)))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the reply was never held")
	}
	// A later request goes up (and is seen); its reply waits behind the
	// held one.
	synced := p.AwaitRequest(wire.OpSync)
	if _, err := c.Write(wire.AppendFrame(nil, []byte(request(2, wire.OpSync)))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("the sync never went up")
	}
	quietFor(t, c, 100*time.Millisecond)
	release()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, xid := range []int32{1, 2} {
		frame, err := wire.ReadFrame(c, nil, 1<<20)
		if err != nil {
			t.Fatalf("reply %d: %v", xid, err)
		}
		var h wire.ReplyHeader
		if err := h.Decode(wire.NewDecoder(frame)); err != nil || h.Xid != xid {
			t.Fatalf("reply %+v, %v; want xid %d", h, err, xid)
		}
	}
}
