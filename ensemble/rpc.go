package ensemble

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Member RPCs over the peer port: the frames, the codes a failure travels
// as, the serving loop, and the calling side with its connection pool.
// Which calls there are, and who answers them, is leader.go's.

// Member RPC frames: u32 length, u8 kind, u64 call id, payload. Replies
// carry the id of their call; a connection may have many calls in flight.
// A reply has its call's kind, or rpcError with a peerCode and text.
const (
	rpcPropose   byte = 1 // txn → index, reply code, reply body
	rpcTouch     byte = 2 // session ids → ack (liveness relay)
	rpcReadIndex byte = 3 // → index the caller must apply before answering sync
	rpcStatus    byte = 4 // → JSON status of the member
	rpcReconfig  byte = 5 // member change → done (leader only)
	rpcError     byte = 255

	// rpcLegacyBadChange is how members before peer codes answered a
	// membership change naming a non-member; still understood, so that a
	// rolling upgrade keeps the error.
	rpcLegacyBadChange byte = 6
)

const maxRPCFrame = 64 << 20

var errPeerGone = errors.New("member connection lost")

// peerCode is why a member RPC failed. It travels as the first byte of an
// rpcError reply, followed by text for the log; the caller acts on the
// code alone.
type peerCode byte

const (
	peerFailed     peerCode = 1 // tried and failed; the text says why
	peerNotLeader  peerCode = 2 // the call needs the leader, and this member is not
	peerBadChange  peerCode = 3 // a membership change names what cannot change
	peerBadRequest peerCode = 4 // the payload does not decode
	peerUnknown    peerCode = 5 // a kind this member does not serve
)

// Errors that member RPCs answer with codes.
var (
	errNotLeader  = errors.New("not leader")
	errBadRequest = errors.New("bad member rpc payload")
	errUnknownRPC = errors.New("unknown member rpc")
)

// peerCodes pairs each code but peerFailed with its error.
var peerCodes = []struct {
	code peerCode
	err  error
}{
	{code: peerNotLeader, err: errNotLeader},
	{code: peerBadChange, err: errBadChange},
	{code: peerBadRequest, err: errBadRequest},
	{code: peerUnknown, err: errUnknownRPC},
}

// peerError is a failure a peer answered a member RPC with. errors.Is
// matches it against the error of its code.
type peerError struct {
	code peerCode
	text string
}

func (e *peerError) Error() string { return "member rpc: " + e.text }

func (e *peerError) Is(target error) bool {
	for _, c := range peerCodes {
		if c.code == e.code {
			return c.err == target
		}
	}
	return false
}

// encodePeerError is the payload of the rpcError reply for err.
func encodePeerError(err error) []byte {
	code := peerFailed
	for _, c := range peerCodes {
		if errors.Is(err, c.err) {
			code = c.code
			break
		}
	}
	return append([]byte{byte(code)}, err.Error()...)
}

// peerErrorOf is the error a reply of another kind than its call's
// stands for.
func peerErrorOf(kind byte, payload []byte) error {
	switch {
	case kind == rpcLegacyBadChange:
		return &peerError{code: peerBadChange, text: string(payload)}
	case kind != rpcError:
		return &peerError{code: peerFailed, text: fmt.Sprintf("unexpected member rpc reply %d", kind)}
	case len(payload) > 0 && payload[0] >= byte(peerFailed) && payload[0] <= byte(peerUnknown):
		return &peerError{code: peerCode(payload[0]), text: string(payload[1:])}
	}
	// A member from before peer codes: its text alone.
	return &peerError{code: peerFailed, text: string(payload)}
}

// rpcErrorText describes a failure reply.
func rpcErrorText(kind byte, payload []byte) string { return peerErrorOf(kind, payload).Error() }

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

// newFrameWriter starts the sending goroutine through tr; it ends when a
// write fails (fail is called) or stop closes.
func newFrameWriter(tr *tracker, w io.Writer, stop <-chan struct{}, fail func(error)) *frameWriter {
	fw := &frameWriter{kick: make(chan struct{}, 1)}
	tr.Go(func() {
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
	})
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
	kick(fw.kick)
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

// serveRPC answers the calls arriving on c until it fails; its goroutines
// are started through tr.
func serveRPC(tr *tracker, c net.Conn, h rpcHandler) {
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	r := bufio.NewReaderSize(c, 64<<10)
	w := newFrameWriter(tr, c, stop, func(error) { c.Close() })
	for {
		kind, id, payload, err := readRPC(r)
		if err != nil {
			return
		}
		finish := h(kind, payload)
		tr.Go(func() {
			rk, rp := finish()
			_ = w.send(rk, id, rp)
		})
	}
}

type rpcResult struct {
	kind    byte
	payload []byte
	err     error
	at      time.Time // when the reply was read
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

// dialRPC connects to a peer's member RPCs; the connection's goroutines
// are started through tr.
func dialRPC(tr *tracker, addr string, timeout time.Duration, pt *peerTLS) (*rpcConn, error) {
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
	rc.w = newFrameWriter(tr, c, rc.stop, rc.fail)
	tr.Go(rc.readLoop)
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
			ch <- rpcResult{kind: kind, payload: payload, at: time.Now()}
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

// peerPool keeps one connection per peer address. It dials outside its
// lock, at most once at a time per address: callers to one address wait
// for that dial, callers to others do not.
type peerPool struct {
	tr  *tracker
	tls *peerTLS // nil: plaintext

	mu      sync.Mutex
	conns   map[string]*rpcConn
	dialing map[string]*poolDial
	closed  bool
}

// poolDial is a dial in progress; done closes when c or err is set.
type poolDial struct {
	done chan struct{}
	c    *rpcConn
	err  error
}

var errPoolClosed = errors.New("member closing: no more peer connections")

func (p *peerPool) get(addr string) (*rpcConn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	if c := p.conns[addr]; c != nil && !c.broken() {
		p.mu.Unlock()
		return c, nil
	}
	if d := p.dialing[addr]; d != nil {
		p.mu.Unlock()
		<-d.done
		return d.c, d.err
	}
	if p.dialing == nil {
		p.dialing = map[string]*poolDial{}
	}
	if p.conns == nil {
		p.conns = map[string]*rpcConn{}
	}
	d := &poolDial{done: make(chan struct{})}
	p.dialing[addr] = d
	p.mu.Unlock()

	d.c, d.err = dialRPC(p.tr, addr, 2*time.Second, p.tls)
	p.mu.Lock()
	delete(p.dialing, addr)
	switch {
	case p.closed && d.err == nil:
		d.c.Close()
		d.c, d.err = nil, errPoolClosed
	case d.err == nil:
		p.conns[addr] = d.c
	}
	p.mu.Unlock()
	close(d.done)
	return d.c, d.err
}

// call makes one call to the peer at addr and returns the reply's payload;
// a failure reply is a *peerError.
func (p *peerPool) call(ctx context.Context, addr string, kind byte, payload []byte) ([]byte, error) {
	rc, err := p.get(addr)
	if err != nil {
		return nil, err
	}
	k, reply, err := rc.call(ctx, kind, payload)
	if err != nil {
		return nil, err
	}
	if k != kind {
		return nil, peerErrorOf(k, reply)
	}
	return reply, nil
}

// closeAll closes every connection; the pool dials no more.
func (p *peerPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
