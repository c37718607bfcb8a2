package chaos

import (
	"net"
	"sync"
)

// proxy fronts one port of one member. Every connection it accepts is
// attributed to a source (a member index, found by the connection's source
// IP, or -1 for anyone else) and relayed in both directions. Before each
// chunk of bytes a direction asks blocked(from, to); while that holds the
// bytes are read and thrown away, as a pulled cable would lose them, so
// neither end sees a reset. A stream that lost bytes is corrupt, so once a
// direction is let through again the connection is closed and the ends
// reconnect.
type proxy struct {
	ln      net.Listener
	target  string
	to      int                     // the member behind the proxy
	source  func(net.Addr) int      // member index of a connection's source
	blocked func(from, to int) bool // from → to bytes are dropped

	mu     sync.Mutex
	conns  map[*relay]struct{}
	closed bool
	wg     sync.WaitGroup
}

type relay struct {
	a, b    net.Conn // a: the dialer's side, b: the member's
	from    int
	mu      sync.Mutex
	tainted bool // bytes were dropped: the stream is no longer whole
}

func newProxy(listen, target string, to int, source func(net.Addr) int, blocked func(from, to int) bool) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, to: to, source: source, blocked: blocked, conns: map[*relay]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	from := p.source(c.RemoteAddr())
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		// The member is down: the dialer sees a closed connection, as
		// close to a refusal as an accepted connection gets.
		c.Close()
		return
	}
	r := &relay{a: c, b: up, from: from}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[r] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pump(r, r.a, r.b, from, p.to); done <- struct{}{} }()
	go func() { p.pump(r, r.b, r.a, p.to, from); done <- struct{}{} }()
	<-done
	r.close()
	<-done
	p.mu.Lock()
	delete(p.conns, r)
	p.mu.Unlock()
}

func (r *relay) close() {
	r.a.Close()
	r.b.Close()
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

func (p *proxy) pump(r *relay, src, dst net.Conn, from, to int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.blocked(from, to) {
				r.taint()
			} else {
				if r.isTainted() {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// reconsider closes connections that lost bytes and whose path is open
// again in both directions, so that healing does not wait for their next
// byte to notice.
func (p *proxy) reconsider() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range p.conns {
		if r.isTainted() && !p.blocked(r.from, p.to) && !p.blocked(p.to, r.from) {
			r.close()
		}
	}
}

// dropAll closes every relayed connection (used when the member behind the
// proxy is killed, so no half-dead relay lingers).
func (p *proxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range p.conns {
		r.close()
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	for r := range p.conns {
		r.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
