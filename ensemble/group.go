package ensemble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Group commit: the leader packs the writes that queue up while earlier
// entries are being committed into one raft entry, so a burst of writes
// costs one log append, one replication message and one fsync per member
// instead of one per write.
//
// Every write still has a zxid of its own (two lock nodes created in one
// entry must not share a fencing token): once an ensemble groups, the zxid
// of the k-th write of the entry at raft index i is i<<zxidShift | k, for
// every entry, grouped or not. Before, the zxid was the index itself; the
// switch happens at the first group entry in the log, which every member
// applies at the same position, so all members agree on every zxid, and
// zxids keep rising across it (i<<zxidShift > i-1).
//
// An older member cannot decode a group entry, so the leader proposes
// groups only once every voter says that it can (groupGate); a member that
// has applied a group entry (or restored a snapshot taken after one) is
// past the switch for good.

const (
	// groupTag leads a group entry; a single txn's encoding starts with
	// its format version, which is never this. A group of no txns marks
	// the switch as soon as the gate opens.
	groupTag byte = 0xC7
	// zxidShift leaves room for maxGroup writes per entry in the zxid.
	zxidShift = 8
	maxGroup  = 1 << zxidShift
	// maxGroupBytes bounds a group entry; a write larger than this goes
	// in an entry of its own.
	maxGroupBytes = 1 << 20
	// groupsInFlight is how many group entries the leader has handed to
	// raft and not yet seen applied. While that many are pending, new
	// writes queue for the next group; a lone writer never waits.
	groupsInFlight = 2
)

// encodeGroup is a group entry of the given encoded txns.
func encodeGroup(txns []*queuedTxn) []byte {
	n := 1 + binary.MaxVarintLen64
	for _, q := range txns {
		n += binary.MaxVarintLen32 + len(q.data)
	}
	b := make([]byte, 0, n)
	b = append(b, groupTag)
	b = binary.AppendUvarint(b, uint64(len(txns)))
	for _, q := range txns {
		b = binary.AppendUvarint(b, uint64(len(q.data)))
		b = append(b, q.data...)
	}
	return b
}

// isGroup reports whether a log entry's data is a group entry.
func isGroup(data []byte) bool { return len(data) > 0 && data[0] == groupTag }

// decodeGroup splits a group entry into its encoded txns (slices of data).
func decodeGroup(data []byte) ([][]byte, error) {
	if !isGroup(data) {
		return nil, errors.New("not a group entry")
	}
	b := data[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxGroup {
		return nil, fmt.Errorf("group entry: bad count")
	}
	b = b[k:]
	out := make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("group entry: txn %d of %d truncated", i, n)
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("group entry: %d bytes after its last txn", len(b))
	}
	return out, nil
}

// groupZxid is the zxid of the pos-th write of the entry at index, once
// the ensemble groups.
func groupZxid(index uint64, pos int) int64 { return int64(index)<<zxidShift | int64(pos) }

// queuedTxn is one write in the proposer: queued (or, on the fast path,
// proposed by its caller), then part of a group entry handed to raft, then
// answered.
type queuedTxn struct {
	data   []byte
	queued time.Time
	done   chan struct{} // closed once res or err is set
	res    applyResult
	err    error // raft's error for the group, or ErrClosed
}

// wait returns the write's result once runAnswer has set it, or ErrClosed
// if ctx ends first.
func (q *queuedTxn) wait(ctx context.Context) (applyResult, error) {
	select {
	case <-q.done:
		return q.res, q.err
	case <-ctx.Done():
		return applyResult{}, ErrClosed
	}
}

func (q *queuedTxn) finish(res applyResult, err error) {
	q.res, q.err = res, err
	close(q.done)
}

// proposer is the leader's group commit: one goroutine forms groups from
// the queue and hands them to raft, another waits for them in order and
// answers their writes. A write that finds nothing queued and a slot free
// skips the first: its caller hands it to raft as a group of one, which
// saves a lone writer a goroutine hand-off on the way in. (The caller does
// not wait for raft's future itself: a future has one waiter, and
// runAnswer must see every one to free its slot, even if the caller gives
// up.)
type proposer struct {
	raft    *raft.Raft
	sizes   prometheus.Observer // writes per group
	in      chan *queuedTxn
	slots   chan struct{}     // one per group proposed and not yet answered
	pending chan pendingGroup // those groups, in log order

	// mu orders raft.Apply calls against the queue: it guards queued and
	// closed, and is held around every Apply of the proposer and its send
	// to pending, so a write proposed on the fast path never overtakes one
	// queued before it and pending stays in log order.
	mu     sync.Mutex
	queued int  // writes sent to in (or held by runForm) and not yet applied
	closed bool // runForm has ended; pending is closed
}

type pendingGroup struct {
	f    raft.ApplyFuture
	txns []*queuedTxn
}

func newProposer(r *raft.Raft, sizes prometheus.Observer) *proposer {
	return &proposer{
		raft:    r,
		sizes:   sizes,
		in:      make(chan *queuedTxn, 4*maxGroup),
		slots:   make(chan struct{}, groupsInFlight),
		pending: make(chan pendingGroup, groupsInFlight),
	}
}

// propose queues an encoded txn; the order of calls is the order in the
// log.
func (p *proposer) propose(ctx context.Context, data []byte) (*queuedTxn, error) {
	q := &queuedTxn{data: data, queued: time.Now(), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if p.queued == 0 {
		select {
		case p.slots <- struct{}{}:
			group := []*queuedTxn{q}
			p.pending <- pendingGroup{f: p.raft.Apply(encodeGroup(group), 0), txns: group} // room: one per slot
			p.mu.Unlock()
			p.sizes.Observe(1)
			return q, nil
		default:
		}
	}
	p.queued++
	p.mu.Unlock()
	select {
	case p.in <- q:
		return q, nil
	case <-ctx.Done():
		p.mu.Lock()
		p.queued--
		p.mu.Unlock()
		return nil, ErrClosed
	}
}

// form takes the queue's head (or held, a write taken earlier that did not
// fit its group) and whatever is queued behind it, up to a group's limits.
func (p *proposer) form(ctx context.Context, held *queuedTxn) (group []*queuedTxn, next *queuedTxn, ok bool) {
	first := held
	if first == nil {
		select {
		case first = <-p.in:
		case <-ctx.Done():
			return nil, nil, false
		}
	}
	group = []*queuedTxn{first}
	size := len(first.data)
	for len(group) < maxGroup {
		var q *queuedTxn
		select {
		case q = <-p.in:
		default:
			return group, nil, true
		}
		if size+len(q.data) > maxGroupBytes {
			return group, q, true
		}
		group = append(group, q)
		size += len(q.data)
	}
	return group, nil, true
}

// runForm proposes groups until ctx ends. A slot is taken before the queue
// is read, so writes gather while groupsInFlight groups are being
// committed, and a write that finds a free slot is proposed at once.
func (p *proposer) runForm(ctx context.Context) {
	defer func() {
		p.mu.Lock()
		p.closed = true
		close(p.pending)
		p.mu.Unlock()
	}()
	var held *queuedTxn
	for {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.drain(held)
			return
		}
		group, next, ok := p.form(ctx, held)
		if !ok {
			p.drain(held)
			return
		}
		held = next
		p.sizes.Observe(float64(len(group)))
		p.mu.Lock()
		p.pending <- pendingGroup{f: p.raft.Apply(encodeGroup(group), 0), txns: group}
		p.queued -= len(group)
		p.mu.Unlock()
	}
}

// drain fails the writes that were queued but never proposed.
func (p *proposer) drain(held *queuedTxn) {
	if held != nil {
		held.finish(applyResult{}, ErrClosed)
	}
	for {
		select {
		case q := <-p.in:
			q.finish(applyResult{}, ErrClosed)
		default:
			return
		}
	}
}

// runAnswer answers the writes of each proposed group once raft has
// applied (or refused) it, and frees its slot.
func (p *proposer) runAnswer() {
	for pg := range p.pending {
		err := pg.f.Error()
		var results []applyResult
		if err == nil {
			results = groupResults(pg.f.Response(), len(pg.txns))
			if len(results) != len(pg.txns) {
				err = fmt.Errorf("group of %d writes applied as %d", len(pg.txns), len(results))
			}
		}
		<-p.slots
		for i, q := range pg.txns {
			if err != nil {
				q.finish(applyResult{}, err)
				continue
			}
			q.finish(results[i], nil)
		}
	}
}

// groupResults are the results of a group entry of n writes from its
// apply's response; only one caller may take them.
func groupResults(resp any, n int) []applyResult {
	switch r := resp.(type) {
	case *groupApplied:
		return r.take()
	case applyResult: // the group could not be decoded
		results := make([]applyResult, n)
		for i := range results {
			results[i] = r
		}
		return results
	}
	return nil
}

// grouping reports whether this member, as leader, proposes group entries.
func (m *Member) grouping() bool {
	return !m.cfg.legacyEntries && (m.fsm.grouped.Load() || m.groupsAgreed.Load())
}

// groupGate opens grouping on a leader once every member of the raft
// configuration reports that it reads group entries (MemberStatus's
// GroupCommit); once the log holds a group entry it is open for good. It
// asks when this member becomes leader and then every groupGateEvery
// until the answer is yes.
func (m *Member) groupGate() {
	if m.cfg.legacyEntries {
		return
	}
	t := time.NewTicker(groupGateEvery)
	defer t.Stop()
	for !m.fsm.grouped.Load() {
		if !m.IsLeader() {
			m.groupsAgreed.Store(false)
		} else if !m.groupsAgreed.Load() {
			if err := m.allReadGroups(); err == nil {
				m.groupsAgreed.Store(true)
				m.markGrouped()
			} else {
				m.log.Debug("writes not grouped yet", "reason", err)
			}
		}
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
}

const groupGateEvery = 250 * time.Millisecond

// markGrouped proposes an empty group, which switches every member to
// grouped zxids at once rather than with the next write.
func (m *Member) markGrouped() {
	err := m.await(m.raft.Apply(encodeGroup(nil), 5*time.Second))
	if err != nil {
		m.log.Warn("switching to grouped writes", "err", err)
		return
	}
	m.log.Info("every member reads group entries: writes are grouped from now on")
}

// allReadGroups asks every other member whether it reads group entries.
func (m *Member) allReadGroups() error {
	cf := m.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.ctx, time.Second)
	defer cancel()
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == m.cfg.ID {
			continue
		}
		if err := m.readsGroups(ctx, string(s.Address)); err != nil {
			return fmt.Errorf("member %s: %w", s.ID, err)
		}
	}
	return nil
}

// readsGroups asks the member at a peer address whether it reads group
// entries; a member older than group commit does not say it does.
func (m *Member) readsGroups(ctx context.Context, addr string) error {
	payload, err := m.pool.call(ctx, addr, rpcStatus, nil)
	if err != nil {
		return err
	}
	var ms MemberStatus
	if err := json.Unmarshal(payload, &ms); err != nil {
		return err
	}
	if !ms.GroupCommit {
		return errOldMember
	}
	return nil
}

var errOldMember = errors.New("runs a coordrun version that cannot read group entries")
