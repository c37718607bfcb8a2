package ensemble

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/hashicorp/raft"
)

// applyResult is what the FSM returns for one committed txn; raft hands it
// to the ApplyFuture on the member that proposed it.
type applyResult struct {
	res  tree.Result
	zxid int64
	err  error // the log entry could not be decoded
	// The apply of the entry's batch began at started (the wait for the
	// tree's lock included); done is when this entry's apply ended.
	started, done time.Time
}

// groupApplied is the FSM's response to a group entry. raft's log cache
// keeps each entry it caches by a pointer into the entry's future, and so
// keeps the future's response alive for as long as the entry stays cached:
// the proposer takes the results out once it has answered them (take), so
// what stays behind is this empty box, not every write's result.
type groupApplied struct {
	results []applyResult
}

// take returns the results and empties the box.
func (g *groupApplied) take() []applyResult {
	r := g.results
	g.results = nil
	return r
}

// fsm adapts tree.Tree to raft. The zxid of a txn is its raft log index
// until the first group entry, and index<<zxidShift | its position in the
// entry from there on (group.go), so zxids are monotonic forever and never
// reused, including across leader changes and restarts.
//
// Concurrency: raft calls ApplyBatch, Snapshot and Restore from one
// goroutine. Everyone else sees the tree only through view, which holds
// the read lock for as long as its function runs; ApplyBatch holds the
// write lock and calls afterApply under it, so a watch notification is
// queued on its connection before any view can observe the state it
// announces. mu is not touched outside this file.
type fsm struct {
	mu   sync.RWMutex // guards tree, and orders applies against views
	tree *tree.Tree

	applied  atomic.Int64 // zxid of the last applied txn; the member's zxid
	advanced broadcast    // notified whenever applied advances

	// The tree's size as of the last batch or restore, kept apart from
	// mu: the tree quota admits every write by it (treequota.go), and a
	// connection must not wait there behind a batch being applied. The
	// three are stored one by one and may be read from two batches; the
	// quota's bound is only as exact as the writes in flight anyway.
	nodes, ephemerals atomic.Int64
	dataSize          atomic.Int64
	// grouped: a group entry has been applied (here, or before the
	// snapshot restored), so zxids are index<<zxidShift | position.
	grouped atomic.Bool

	// afterApply runs under mu (write) for every applied txn, and for
	// every applied configuration (txn nil).
	afterApply func(txn *tree.Txn, res *tree.Result, zxid int64)
	// afterRestore runs under mu (write) after a snapshot replaced the tree.
	afterRestore func(t *tree.Tree)
	// afterBatch runs after a batch, outside mu, with the index and term
	// of its last command.
	afterBatch func(index, term uint64)
}

func newFSM() *fsm {
	f := &fsm{tree: tree.New()}
	f.publishSize()
	return f
}

// publishSize stores the tree's size for size; under mu (write), or
// before the fsm is shared.
func (f *fsm) publishSize() {
	f.nodes.Store(int64(f.tree.NodeCount()))
	f.ephemerals.Store(int64(f.tree.EphemeralCount()))
	f.dataSize.Store(f.tree.ApproximateDataSize())
}

// size is the tree's size as of the last applied batch, without waiting
// for one in progress.
func (f *fsm) size() (nodes, ephemerals int, dataSize int64) {
	return int(f.nodes.Load()), int(f.ephemerals.Load()), f.dataSize.Load()
}

// view runs fn with the tree and the zxid it has applied, under the read
// lock: no apply, and so no watch notification, happens while fn runs. fn
// must not keep t, and must not wait for anything an apply could be needed
// for.
func (f *fsm) view(fn func(t *tree.Tree, zxid int64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.tree, f.applied.Load())
}

// lastZxid is the zxid of the last applied txn.
func (f *fsm) lastZxid() int64 { return f.applied.Load() }

var _ raft.BatchingFSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

func (f *fsm) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	started := time.Now()
	f.mu.Lock()
	var last int64
	var lastIndex, lastTerm uint64
	for i, l := range logs {
		if l.Type == raft.LogConfiguration {
			zxid := int64(l.Index)
			if f.grouped.Load() {
				zxid = groupZxid(l.Index, 0)
			}
			f.applyConfiguration(l, zxid)
			last = zxid
			continue
		}
		if l.Type != raft.LogCommand {
			continue
		}
		lastIndex, lastTerm = l.Index, l.Term
		if !isGroup(l.Data) {
			zxid := int64(l.Index)
			if f.grouped.Load() {
				zxid = groupZxid(l.Index, 0)
			}
			out[i] = f.applyTxn(l.Data, zxid, started)
			last = zxid
			continue
		}
		txns, err := decodeGroup(l.Data)
		if err != nil {
			// As for an undecodable txn below: every member skips it alike.
			// The zxid of its first position is used up, so the switch to
			// grouped zxids happens here too.
			f.grouped.Store(true)
			last = groupZxid(l.Index, 0)
			out[i] = applyResult{zxid: last, err: fmt.Errorf("undecodable group at index %d: %w", l.Index, err), started: started, done: time.Now()}
			continue
		}
		// An empty group switches the mode and uses no zxid.
		f.grouped.Store(true)
		results := make([]applyResult, len(txns))
		for k, data := range txns {
			last = groupZxid(l.Index, k)
			results[k] = f.applyTxn(data, last, started)
		}
		out[i] = &groupApplied{results: results}
	}
	if last != 0 {
		f.applied.Store(last)
	}
	f.publishSize()
	f.mu.Unlock()
	if last != 0 {
		f.advanced.notify()
	}
	// Also after a batch whose commands took no zxid (the empty group
	// that switches to grouped zxids): the commit pusher must hear of
	// every applied command, or followers would wait for raft's commit
	// timer to learn of the writes committed before it.
	if lastIndex != 0 && f.afterBatch != nil {
		f.afterBatch(lastIndex, lastTerm)
	}
	return out
}

// applyConfiguration publishes a committed membership in
// /zookeeper/config, as ZooKeeper does once a configuration is in force:
// every member applies the same entries, so the node is the same
// everywhere. The entry takes the zxid of its position, as a reconfig does
// on ZooKeeper; the configuration an ensemble starts with (raft's first
// entry) is version 0, like a static one, and a lone member's leaves the
// node empty, as on a standalone ZooKeeper. Under mu.
func (f *fsm) applyConfiguration(l *raft.Log, zxid int64) {
	servers := raft.DecodeConfiguration(l.Data).Servers
	version := zxid
	if l.Index <= 1 {
		if len(servers) <= 1 {
			return
		}
		version = 0
	}
	ev := f.tree.SetConfigData(zkConfigText(servers, version), version)
	if f.afterApply != nil {
		f.afterApply(nil, &tree.Result{Events: []tree.Event{ev}}, zxid)
	}
}

// applyTxn applies one encoded txn as zxid, under mu.
func (f *fsm) applyTxn(data []byte, zxid int64, started time.Time) applyResult {
	var txn tree.Txn
	if err := txn.UnmarshalBinary(data); err != nil {
		// Every member rejects the same bytes alike, so skipping keeps
		// them identical; the proposer learns of it through the result.
		return applyResult{zxid: zxid, err: fmt.Errorf("undecodable txn at zxid %d: %w", zxid, err), started: started, done: time.Now()}
	}
	res := f.tree.Apply(&txn, zxid)
	if f.afterApply != nil {
		f.afterApply(&txn, &res, zxid)
	}
	return applyResult{res: res, zxid: zxid, started: started, done: time.Now()}
}

// waitApplied blocks until the command at index has been applied here.
func (f *fsm) waitApplied(ctx context.Context, index int64) error {
	for {
		ch := f.advanced.wait()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Snapshot clones the tree under the read lock; serializing and writing it
// to disk then happen in Persist without blocking applies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return f.clone(), nil
}

// clone is a private copy of the tree and its zxid, taken in one view.
func (f *fsm) clone() *fsmSnapshot {
	var s fsmSnapshot
	f.view(func(t *tree.Tree, zxid int64) {
		s.tree = t.Clone()
		s.hdr = snapHeader{zxid: zxid, grouped: f.grouped.Load()}
	})
	return &s
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 1<<20)
	hdr, err := readSnapHeader(r)
	if err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	t, err := tree.ReadSnapshot(r)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	f.mu.Lock()
	f.tree = t
	f.applied.Store(hdr.zxid)
	f.grouped.Store(hdr.grouped)
	f.publishSize()
	if f.afterRestore != nil {
		f.afterRestore(t)
	}
	f.mu.Unlock()
	f.advanced.notify()
	return nil
}

// snapHeader leads a snapshot (raft's, and a backup): the applied zxid,
// and whether zxids were grouped by then. The ungrouped form is the zxid
// alone (8 bytes, big-endian), as coordrun wrote it before group commit;
// the grouped form is groupedSnapMagic and then the zxid. A zxid is never
// negative, so the magic's top bit tells the two apart.
type snapHeader struct {
	zxid    int64
	grouped bool
}

const groupedSnapMagic uint64 = 0xC7C7_0000_6772_7001

func (h snapHeader) bytes() []byte {
	var b []byte
	if h.grouped {
		b = binary.BigEndian.AppendUint64(b, groupedSnapMagic)
	}
	return binary.BigEndian.AppendUint64(b, uint64(h.zxid))
}

func readSnapHeader(r io.Reader) (snapHeader, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return snapHeader{}, err
	}
	v := binary.BigEndian.Uint64(b[:])
	if v>>63 == 0 {
		return snapHeader{zxid: int64(v)}, nil
	}
	if v != groupedSnapMagic {
		return snapHeader{}, fmt.Errorf("unknown snapshot format %#x", v)
	}
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return snapHeader{}, err
	}
	z := binary.BigEndian.Uint64(b[:])
	if z>>63 != 0 {
		return snapHeader{}, fmt.Errorf("snapshot zxid %#x out of range", z)
	}
	return snapHeader{zxid: int64(z), grouped: true}, nil
}

// fsmSnapshot is a private copy of the tree and its header, written to the
// snapshot store as the header followed by the tree's own format.
type fsmSnapshot struct {
	hdr  snapHeader
	tree *tree.Tree
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 1<<20)
	_, err := w.Write(s.hdr.bytes())
	if err == nil {
		err = s.tree.WriteSnapshot(w)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
