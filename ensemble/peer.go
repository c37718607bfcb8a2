package ensemble

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The peer port carries two protocols. The first byte of every connection
// says which: raft's own transport, or the member RPCs below (write
// forwarding, session liveness relay, read index, status).
const (
	streamRaft   byte = 'R'
	streamMember byte = 'M'
)

// peerMux accepts connections on the peer port and routes them by their
// first byte. It implements raft.StreamLayer for the raft side.
type peerMux struct {
	ln      net.Listener
	adv     net.Addr // the address other members dial; raft tells it to them
	raftCh  chan net.Conn
	handler func(net.Conn)
	log     *slog.Logger
	closed  chan struct{}
	once    sync.Once
	tls     *peerTLS // dialing side of peer TLS; nil: plaintext
}

func newPeerMux(ln net.Listener, handler func(net.Conn), log *slog.Logger) *peerMux {
	m := &peerMux{ln: ln, raftCh: make(chan net.Conn), handler: handler, log: log, closed: make(chan struct{})}
	go m.serve()
	return m
}

func (m *peerMux) serve() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.log.Error("peer accept", "err", err)
			return
		}
		go m.route(c)
	}
}

func (m *peerMux) route(c net.Conn) {
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch b[0] {
	case streamRaft:
		select {
		case m.raftCh <- c:
		case <-m.closed:
			c.Close()
		}
	case streamMember:
		m.handler(c)
	default:
		c.Close()
	}
}

// Accept implements net.Listener for raft.
func (m *peerMux) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftCh:
		return c, nil
	case <-m.closed:
		return nil, net.ErrClosed
	}
}

func (m *peerMux) Close() error {
	m.once.Do(func() { close(m.closed) })
	return m.ln.Close()
}

// Addr is the advertised address: raft sends it to followers as the
// leader's address, so it must be dialable, never a wildcard bind.
func (m *peerMux) Addr() net.Addr {
	if m.adv != nil {
		return m.adv
	}
	return m.ln.Addr()
}

// Dial implements raft.StreamLayer.
func (m *peerMux) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := m.tls.dialTimeout(string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{streamRaft}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Member RPC frames: u32 length, u8 kind, u64 call id, payload. Replies
// carry the id of their call; a connection may have many calls in flight.
const (
	rpcPropose   byte = 1 // txn → index, reply code, reply body
	rpcTouch     byte = 2 // session ids → ack (liveness relay)
	rpcReadIndex byte = 3 // → index the caller must apply before answering sync
	rpcStatus    byte = 4 // → JSON status of the member
	rpcReconfig  byte = 5 // member change → done (leader only)
	rpcBadChange byte = 6 // reply: the member change names a non-member
	rpcError     byte = 255
)

const maxRPCFrame = 64 << 20

var errPeerGone = errors.New("member connection lost")

// appendRPC appends one frame to b.
func appendRPC(b []byte, kind byte, id uint64, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(9+len(payload)))
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, id)
	return append(b, payload...)
}

// frameWriter sends frames from one goroutine: frames queued while a write
// is under way go out together in the next one, so a burst of calls or
// replies costs one system call rather than one each.
type frameWriter struct {
	mu      sync.Mutex
	pending []byte
	err     error
	kick    chan struct{}
}

// newFrameWriter starts the sending goroutine; it ends when a write fails
// (fail is called) or stop closes.
func newFrameWriter(w io.Writer, stop <-chan struct{}, fail func(error)) *frameWriter {
	fw := &frameWriter{kick: make(chan struct{}, 1)}
	go func() {
		var spare []byte
		for {
			select {
			case <-fw.kick:
			case <-stop:
				return
			}
			// Two buffers take turns: frames are appended to one while
			// the other is written, never to the one being written.
			fw.mu.Lock()
			buf := fw.pending
			if len(buf) == 0 {
				fw.mu.Unlock()
				continue
			}
			fw.pending = spare[:0]
			fw.mu.Unlock()
			if _, err := w.Write(buf); err != nil {
				fw.mu.Lock()
				fw.err = err
				fw.mu.Unlock()
				fail(err)
				return
			}
			spare = buf
		}
	}()
	return fw
}

// send queues a frame; frames go out in the order queued.
func (fw *frameWriter) send(kind byte, id uint64, payload []byte) error {
	fw.mu.Lock()
	if fw.err != nil {
		err := fw.err
		fw.mu.Unlock()
		return err
	}
	fw.pending = appendRPC(fw.pending, kind, id, payload)
	fw.mu.Unlock()
	select {
	case fw.kick <- struct{}{}:
	default:
	}
	return nil
}

func readRPC(r *bufio.Reader) (kind byte, id uint64, payload []byte, err error) {
	var hdr [13]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 9 || n > maxRPCFrame {
		return 0, 0, nil, fmt.Errorf("member rpc frame of %d bytes", n)
	}
	kind = hdr[4]
	id = binary.BigEndian.Uint64(hdr[5:])
	payload = make([]byte, n-9)
	_, err = io.ReadFull(r, payload)
	return
}

// rpcHandler handles one call. It runs on the connection's read loop, so
// work that must keep the arrival order (proposing forwarded writes) is
// done before it returns; the returned function finishes the call on its
// own goroutine and gives the reply kind and payload.
type rpcHandler func(kind byte, payload []byte) func() (byte, []byte)

func serveRPC(c net.Conn, h rpcHandler) {
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	r := bufio.NewReaderSize(c, 64<<10)
	w := newFrameWriter(c, stop, func(error) { c.Close() })
	for {
		kind, id, payload, err := readRPC(r)
		if err != nil {
			return
		}
		finish := h(kind, payload)
		go func() {
			rk, rp := finish()
			_ = w.send(rk, id, rp)
		}()
	}
}

type rpcResult struct {
	kind    byte
	payload []byte
	err     error
}

// rpcConn is the calling side of one member connection.
type rpcConn struct {
	c       net.Conn
	w       *frameWriter
	stop    chan struct{} // closed by fail: ends the writer
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan rpcResult
	err     error
}

func dialRPC(addr string, timeout time.Duration, pt *peerTLS) (*rpcConn, error) {
	c, err := pt.dialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if _, err := c.Write([]byte{streamMember}); err != nil {
		c.Close()
		return nil, err
	}
	rc := &rpcConn{c: c, stop: make(chan struct{}), pending: map[uint64]chan rpcResult{}}
	rc.w = newFrameWriter(c, rc.stop, rc.fail)
	go rc.readLoop()
	return rc, nil
}

func (rc *rpcConn) readLoop() {
	r := bufio.NewReaderSize(rc.c, 64<<10)
	for {
		kind, id, payload, err := readRPC(r)
		if err != nil {
			rc.fail(err)
			return
		}
		rc.mu.Lock()
		ch := rc.pending[id]
		delete(rc.pending, id)
		rc.mu.Unlock()
		if ch != nil {
			ch <- rpcResult{kind: kind, payload: payload}
		}
	}
}

func (rc *rpcConn) fail(err error) {
	rc.mu.Lock()
	if rc.err == nil {
		rc.err = fmt.Errorf("%w: %v", errPeerGone, err)
		close(rc.stop)
	}
	pending := rc.pending
	rc.pending = map[uint64]chan rpcResult{}
	rc.mu.Unlock()
	rc.c.Close()
	for _, ch := range pending {
		ch <- rpcResult{err: rc.err}
	}
}

func (rc *rpcConn) broken() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.err != nil
}

// start sends a call and returns the channel its result arrives on. Calls
// started from one goroutine reach the peer in the order started.
func (rc *rpcConn) start(kind byte, payload []byte) <-chan rpcResult {
	ch := make(chan rpcResult, 1)
	rc.mu.Lock()
	if rc.err != nil {
		err := rc.err
		rc.mu.Unlock()
		ch <- rpcResult{err: err}
		return ch
	}
	rc.nextID++
	id := rc.nextID
	rc.pending[id] = ch
	// Queued under mu, so calls reach the wire in the order started.
	err := rc.w.send(kind, id, payload)
	rc.mu.Unlock()
	if err != nil {
		rc.fail(err)
	}
	return ch
}

func (rc *rpcConn) call(ctx context.Context, kind byte, payload []byte) (byte, []byte, error) {
	ch := rc.start(kind, payload)
	select {
	case res := <-ch:
		return res.kind, res.payload, res.err
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	}
}

func (rc *rpcConn) Close() error {
	rc.fail(net.ErrClosed)
	return nil
}

// peerPool keeps one connection per peer address.
type peerPool struct {
	mu    sync.Mutex
	conns map[string]*rpcConn
	tls   *peerTLS // nil: plaintext
}

func (p *peerPool) get(addr string) (*rpcConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]*rpcConn{}
	}
	if c := p.conns[addr]; c != nil && !c.broken() {
		return c, nil
	}
	c, err := dialRPC(addr, 2*time.Second, p.tls)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
