package testkit

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Proxy relays TCP connections to one target and puts faults between the
// two ends. Up is the direction from the dialer to the target, down the
// way back. The faults:
//
//   - Cut closes every relayed connection at once, as a reset would;
//     CutReplyTo closes a connection instead of passing on the reply to
//     the next request of one opcode, so that the request is applied
//     and its outcome lost; HoldReplyTo keeps that reply (and those
//     behind it) back until released, so that its caller still waits;
//     AwaitRequest tells when the next request of an opcode goes up.
//   - Refuse closes each new connection as soon as it is accepted.
//   - Hold keeps the down bytes back until the next Cut; Delay makes each
//     down chunk wait a while from its arrival.
//   - Silence stops everything, both ways: no byte and no close goes
//     through, new connections are accepted and hear nothing, until
//     Speak, which closes the connections that lived through it (their
//     other end has given up on them meanwhile).
//   - Drop, and the Drop function of the ProxyConfig, lose bytes the way a
//     pulled cable does: they are read and thrown away, and an end of
//     the stream is not passed on either, so neither end hears of it. A
//     stream that lost bytes is corrupt: once its path is open again both
//     ways, Drop(false) or Reconsider closes it and the ends reconnect.
type Proxy struct {
	ln     net.Listener
	target string
	frames bool
	dropIf func(src net.Addr, up bool) bool

	mu     sync.Mutex
	relays map[*relay]struct{}
	refuse bool
	drop   bool
	hold   chan struct{} // non-nil: down bytes wait until it is closed
	silent chan struct{} // non-nil: nothing moves until it is closed
	trap   bool          // silence falls at the next up frame
	delay  time.Duration
	times  []time.Time // when each up frame was forwarded
	armOp  int32       // CutReplyTo's opcode; 0: not armed
	cutXid int32       // the request whose reply is cut; 0: none
	cuts   int
	hold1  *replyHold // HoldReplyTo's, until its request goes up
	holdAt map[int32]*replyHold
	seenOp int32         // AwaitRequest's opcode
	seen   chan struct{} // closed by the next request of seenOp; nil: none awaited
	closed bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// ProxyConfig describes a proxy to start.
type ProxyConfig struct {
	Listen string // where to listen; default 127.0.0.1:0
	Target string
	// Frames reads both streams as ZooKeeper frames (a 4-byte length,
	// then the body), so that FrameTimes, SilenceOnNextFrame and
	// CutReplyTo can act on whole requests and replies. Only for the
	// ZooKeeper client protocol.
	Frames bool
	// Drop, when set, is asked before every chunk of a connection opened
	// from src whether to lose it; up is the direction to the target.
	// Call Reconsider when its answers change.
	Drop func(src net.Addr, up bool) bool
}

// relay is one proxied connection.
type relay struct {
	client, server net.Conn
	src            net.Addr

	mu      sync.Mutex
	tainted bool // bytes or an end were dropped: the stream is no longer whole
	closed  bool
}

// NewProxy starts a proxy; Close stops it.
func NewProxy(cfg ProxyConfig) (*Proxy, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: cfg.Target, frames: cfg.Frames, dropIf: cfg.Drop,
		relays: map[*relay]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartProxy starts a proxy on loopback in front of the ZooKeeper client
// port target, with Frames, and stops it when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(ProxyConfig{Target: target, Frames: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		// The target is down: the dialer sees a closed connection, as
		// close to a refusal as an accepted connection gets.
		c.Close()
		return
	}
	r := &relay{client: c, server: s, src: c.RemoteAddr()}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		r.close()
		return
	}
	p.relays[r] = struct{}{}
	p.mu.Unlock()
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		p.up(r)
	}()
	p.down(r)
	<-upDone
	p.mu.Lock()
	delete(p.relays, r)
	p.mu.Unlock()
}

// up forwards the dialer's bytes (or frames) to the target.
func (p *Proxy) up(r *relay) {
	var frame []byte
	buf := make([]byte, 32<<10)
	for first := true; ; first = false {
		var b []byte
		var err error
		if p.frames {
			frame, err = wire.ReadFrame(r.client, frame[:0], 64<<20)
			if err == nil {
				b = wire.AppendFrame(nil, frame)
				if !first { // the first is the handshake
					p.noteRequest(frame)
				}
			}
		} else {
			var n int
			n, err = r.client.Read(buf)
			b = buf[:n]
		}
		if len(b) > 0 {
			p.springTrap()
			p.quiet()
			switch {
			case p.dropping(r.src, true):
				r.taint()
			case r.isTainted():
				r.close()
				return
			default:
				if p.frames {
					p.mu.Lock()
					p.times = append(p.times, time.Now())
					p.mu.Unlock()
				}
				if _, werr := r.server.Write(b); werr != nil {
					r.close()
					return
				}
			}
		}
		if err != nil {
			p.ended(r, true)
			return
		}
	}
}

type chunk struct {
	b    []byte
	at   time.Time  // when it came from the target
	cut  bool       // the reply CutReplyTo is after: the connection ends instead
	hold *replyHold // the reply HoldReplyTo is after
}

// replyHold is one reply HoldReplyTo keeps back.
type replyHold struct {
	op      int32
	held    chan struct{} // closed once the reply is held
	release chan struct{}
}

// down forwards the target's bytes to the dialer.
func (p *Proxy) down(r *relay) {
	// A reader takes the target's bytes as they come, so that a delay
	// counts for each chunk from its own arrival, not one after another.
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for first := true; ; first = false {
			if p.frames {
				frame, err := wire.ReadFrame(r.server, nil, 64<<20)
				if err != nil {
					return
				}
				ch := chunk{b: wire.AppendFrame(nil, frame), at: time.Now()}
				if !first {
					ch.cut, ch.hold = p.noteReply(frame)
				}
				q <- ch
				continue
			}
			n, err := r.server.Read(buf)
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
		if ch.hold != nil {
			close(ch.hold.held)
			select {
			case <-ch.hold.release:
			case <-p.done:
			}
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
		switch {
		case ch.cut:
			r.close()
			broken = true
		case p.dropping(r.src, false):
			r.taint()
		case r.isTainted():
			r.close()
			broken = true
		default:
			if _, err := r.client.Write(ch.b); err != nil {
				r.close()
				broken = true
			}
		}
	}
	if !broken {
		p.ended(r, false)
	}
}

// ended passes on the end of one direction's source, unless the proxy is
// silent (then it waits) or the direction drops (then the stream is
// tainted and stays open until it is reconsidered).
func (p *Proxy) ended(r *relay, up bool) {
	p.quiet()
	if p.dropping(r.src, up) {
		r.taint()
		return
	}
	r.close()
}

// noteRequest marks the replies that CutReplyTo and HoldReplyTo wait
// for by their request's xid, and tells AwaitRequest.
func (p *Proxy) noteRequest(frame []byte) {
	var h wire.RequestHeader
	if h.Decode(wire.NewDecoder(frame)) != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armOp != 0 && h.Opcode == p.armOp {
		p.armOp, p.cutXid = 0, h.Xid
	}
	if p.hold1 != nil && h.Opcode == p.hold1.op {
		if p.holdAt == nil {
			p.holdAt = map[int32]*replyHold{}
		}
		p.holdAt[h.Xid], p.hold1 = p.hold1, nil
	}
	if p.seen != nil && h.Opcode == p.seenOp {
		close(p.seen)
		p.seen = nil
	}
}

// noteReply says whether frame is the reply to cut (counting it) or to
// hold.
func (p *Proxy) noteReply(frame []byte) (cut bool, hold *replyHold) {
	var h wire.ReplyHeader
	if h.Decode(wire.NewDecoder(frame)) != nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if hold = p.holdAt[h.Xid]; hold != nil {
		delete(p.holdAt, h.Xid)
	}
	if p.cutXid != 0 && h.Xid == p.cutXid {
		p.cutXid = 0
		p.cuts++
		return true, hold
	}
	return false, hold
}

func (p *Proxy) dropping(src net.Addr, up bool) bool {
	p.mu.Lock()
	all := p.drop
	p.mu.Unlock()
	return all || (p.dropIf != nil && p.dropIf(src, up))
}

// quiet waits while the proxy is silent.
func (p *Proxy) quiet() {
	p.mu.Lock()
	ch := p.silent
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *Proxy) springTrap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trap {
		p.trap = false
		if p.silent == nil {
			p.silent = make(chan struct{})
		}
	}
}

func (r *relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.client.Close()
		r.server.Close()
	}
}

func (r *relay) taint() {
	r.mu.Lock()
	r.tainted = true
	r.mu.Unlock()
}

func (r *relay) isTainted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tainted
}

func (p *Proxy) snapshot() []*relay {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*relay, 0, len(p.relays))
	for r := range p.relays {
		out = append(out, r)
	}
	return out
}

// Cut closes every relayed connection and lets held bytes go (to
// connections that are closed by then).
func (p *Proxy) Cut() {
	p.mu.Lock()
	hold := p.hold
	p.hold = nil
	p.mu.Unlock()
	for _, r := range p.snapshot() {
		r.close()
	}
	if hold != nil {
		close(hold)
	}
}

// Refuse makes the proxy close new connections at once (on) or relay
// them again.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Hold keeps every later down byte back until the next Cut.
func (p *Proxy) Hold() {
	p.mu.Lock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
	p.mu.Unlock()
}

// Delay makes every later down chunk wait d after it came.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Silence makes the target fall silent as it does behind a firewall that
// drops its packets: connections stay open, new ones are accepted, and
// not a byte nor a close goes through, either way, until Speak.
func (p *Proxy) Silence() {
	p.mu.Lock()
	if p.silent == nil {
		p.silent = make(chan struct{})
	}
	p.mu.Unlock()
}

// SilenceOnNextFrame makes the silence fall as the next up frame arrives,
// before it goes on.
func (p *Proxy) SilenceOnNextFrame() {
	p.mu.Lock()
	p.trap = true
	p.mu.Unlock()
}

// Silent reports whether the proxy is silent.
func (p *Proxy) Silent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent != nil
}

// Speak ends a silence. The connections that lived through it are closed
// and what they held is dropped, as TCP resets a connection whose other
// end has given up on it meanwhile; new connections work.
func (p *Proxy) Speak() {
	p.mu.Lock()
	ch := p.silent
	p.silent = nil
	p.mu.Unlock()
	for _, r := range p.snapshot() {
		r.close()
	}
	if ch != nil {
		close(ch)
	}
}

// Drop makes every byte and end, both ways, get lost (on), like a network
// partition, or lets them through again, closing the streams that lost
// something.
func (p *Proxy) Drop(on bool) {
	p.mu.Lock()
	p.drop = on
	p.mu.Unlock()
	if !on {
		p.Reconsider()
	}
}

// Dropping reports whether Drop is on.
func (p *Proxy) Dropping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop
}

// Reconsider closes the connections that lost bytes and whose path is
// open again both ways, so that healing does not wait for their next
// byte to notice.
func (p *Proxy) Reconsider() {
	for _, r := range p.snapshot() {
		if r.isTainted() && !p.dropping(r.src, true) && !p.dropping(r.src, false) {
			r.close()
		}
	}
}

// CutReplyTo makes the proxy close the connection that carries the next
// request of opcode op (with Frames) when its reply comes, instead of
// passing the reply on.
func (p *Proxy) CutReplyTo(op int32) {
	p.mu.Lock()
	p.armOp = op
	p.mu.Unlock()
}

// HoldReplyTo keeps back the reply to the next request of opcode op
// (with Frames), and every reply behind it on its connection, until
// release is called; held is closed once the reply is held.
func (p *Proxy) HoldReplyTo(op int32) (held <-chan struct{}, release func()) {
	h := &replyHold{op: op, held: make(chan struct{}), release: make(chan struct{})}
	p.mu.Lock()
	p.hold1 = h
	p.mu.Unlock()
	return h.held, sync.OnceFunc(func() { close(h.release) })
}

// AwaitRequest returns a channel closed when the next request of opcode
// op goes up (with Frames).
func (p *Proxy) AwaitRequest(op int32) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seenOp, p.seen = op, make(chan struct{})
	return p.seen
}

// Cuts is how many replies CutReplyTo has cut.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// FrameCount is how many up frames went through (with Frames).
func (p *Proxy) FrameCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.times)
}

// FrameTimes is when each up frame went through (with Frames).
func (p *Proxy) FrameTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.times...)
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Speak()
	p.Cut()
	close(p.done)
	p.wg.Wait()
}
