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
	"sync/atomic"
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
	rpcSilence   byte = 7 // session id → its silence as JSON (leader only)
	rpcError     byte = 255

	// rpcLegacyBadChange is how members before peer codes answered a
	// membership change naming a non-member; still understood, so that a
	// rolling upgrade keeps the error.
	rpcLegacyBadChange byte = 6
)

// maxRPCFrame bounds a reply read from a member this one dialed (the
// status of a large ensemble, the outcome of a large multi).
const maxRPCFrame = 64 << 20

// maxTouchIDs is the most session ids one rpcTouch carries; a relay with
// more sends several.
const maxTouchIDs = 1 << 16

// rpcBounds are what a member accepts on a member RPC connection: the
// largest payload of each kind of call, checked before the payload is
// allocated, and how long the connection may wait.
type rpcBounds struct {
	// propose bounds a forwarded txn: the client frame it was planned
	// from, and as much again for the identities it carries.
	propose int
	// idle is how long a connection may carry no call at all. Members
	// keep one connection to each peer they call and drop it themselves
	// after poolIdle, well before this.
	idle time.Duration
	// frame is how long the rest of a frame may take once its first
	// byte arrived.
	frame time.Duration
}

const (
	defaultPeerIdle  = 10 * time.Minute
	defaultPeerFrame = 30 * time.Second
	// poolIdle: a pooled connection unused this long is redialed rather
	// than used, so that a call never races the acceptor's idle close.
	poolIdle = 2 * time.Minute
)

// limit is the largest payload a call of kind may have.
func (b rpcBounds) limit(kind byte) int {
	switch kind {
	case rpcPropose:
		return b.propose
	case rpcTouch:
		return 8 * maxTouchIDs
	case rpcReconfig:
		return 64 << 10
	default: // status, read index: no payload; unknown kinds get an error
		return 64
	}
}

// errFrameTooLarge: a member RPC frame over its kind's bound.
var errFrameTooLarge = errors.New("member rpc frame too large")

// anyFrame is the bound of replies: maxRPCFrame whatever the kind.
func anyFrame(byte) int { return maxRPCFrame }

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
	mu      sync.Mutex // guards pending and err
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

// readRPC reads one frame whose payload limit allows for its kind; a
// larger one is refused before anything is allocated for it.
func readRPC(r *bufio.Reader, limit func(kind byte) int) (kind byte, id uint64, payload []byte, err error) {
	var hdr [13]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 9 {
		return 0, 0, nil, fmt.Errorf("member rpc frame of %d bytes", n)
	}
	kind = hdr[4]
	id = binary.BigEndian.Uint64(hdr[5:])
	if n > maxRPCFrame || int(n-9) > limit(kind) {
		return kind, id, nil, fmt.Errorf("%w: kind %d with %d bytes, %d at most", errFrameTooLarge, kind, n-9, limit(kind))
	}
	payload = make([]byte, n-9)
	_, err = io.ReadFull(r, payload)
	return
}

// rpcHandler handles one call. It runs on the connection's read loop, so
// work that must keep the arrival order (proposing forwarded writes) is
// done before it returns; the returned function finishes the call on its
// own goroutine and gives the reply kind and payload.
type rpcHandler func(kind byte, payload []byte) func() (byte, []byte)

// serveRPC answers the calls arriving on c until it fails, within bounds
// b; a frame over its bound ends the connection and is told to refused.
// Its goroutines are started through tr.
func serveRPC(tr *tracker, c net.Conn, b rpcBounds, h rpcHandler, refused func(error)) {
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	r := bufio.NewReaderSize(c, 64<<10)
	w := newFrameWriter(tr, c, stop, func(error) { c.Close() })
	for {
		// Idle between calls for up to b.idle; once a frame has begun,
		// all of it within b.frame: a peer cannot hold a half-sent frame.
		if r.Buffered() == 0 {
			_ = c.SetReadDeadline(time.Now().Add(b.idle))
			if _, err := r.Peek(1); err != nil {
				return
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(b.frame))
		kind, id, payload, err := readRPC(r, b.limit)
		if errors.Is(err, errFrameTooLarge) {
			refused(err)
		}
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
	mu      sync.Mutex    // guards nextID, pending and err
	nextID  uint64
	pending map[uint64]chan rpcResult
	err     error
	used    atomic.Int64 // unix ns of the last call started
}

// dialRPC connects to a peer's member RPCs; the connection's goroutines
// are started through tr.
func dialRPC(tr *tracker, addr string, timeout time.Duration, pt *peerTLS) (*rpcConn, error) {
	c, err := pt.dialStream(addr, timeout, streamMember)
	if err != nil {
		return nil, err
	}
	rc := &rpcConn{c: c, stop: make(chan struct{}), pending: map[uint64]chan rpcResult{}}
	rc.used.Store(time.Now().UnixNano())
	rc.w = newFrameWriter(tr, c, rc.stop, rc.fail)
	tr.Go(rc.readLoop)
	return rc, nil
}

func (rc *rpcConn) readLoop() {
	r := bufio.NewReaderSize(rc.c, 64<<10)
	for {
		kind, id, payload, err := readRPC(r, anyFrame)
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

// idle reports whether no call was started for d and none is pending:
// the acceptor may be about to close the connection for idleness.
func (rc *rpcConn) idle(now time.Time, d time.Duration) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.pending) == 0 && now.Sub(time.Unix(0, rc.used.Load())) > d
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
	rc.used.Store(time.Now().UnixNano())
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

	mu      sync.Mutex // guards conns, dialing and closed
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
		if !c.idle(time.Now(), poolIdle) {
			p.mu.Unlock()
			return c, nil
		}
		c.Close()
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
