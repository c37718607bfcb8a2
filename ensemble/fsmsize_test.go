package ensemble

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/hashicorp/raft"
)

// The tree's size that the quota admits every write by follows each
// applied batch and a restored snapshot, and is read without waiting for
// an apply in progress: a connection planning a write must not queue
// behind the FSM's lock while a large batch is applied.
func TestTreeSizeWithoutApplyLock(t *testing.T) {
	f := newFSM()
	m := &Member{fsm: f}
	n0, _, s0 := m.counts()
	var logs []*raft.Log
	for i := range 5 {
		logs = append(logs, &raft.Log{Index: uint64(3 + i), Term: 1, Type: raft.LogCommand, Data: createTxn(t, fmt.Sprintf("/n%d", i))})
	}
	f.ApplyBatch(logs)
	if n, _, s := m.counts(); n != n0+5 || s != s0+5*3 {
		t.Fatalf("after 5 creates: %d nodes, %d bytes; want %d, %d", n, s, n0+5, s0+15)
	}

	// An apply in progress holds the lock; the size is still there.
	f.mu.Lock()
	got := make(chan int, 1)
	go func() {
		n, _, _ := m.counts()
		got <- n
	}()
	select {
	case n := <-got:
		if n != n0+5 {
			t.Errorf("during an apply: %d nodes, want %d", n, n0+5)
		}
	case <-time.After(10 * time.Second):
		f.mu.Unlock()
		<-got
		t.Fatal("the tree's size waited for the apply lock")
	}
	f.mu.Unlock()

	// A restored snapshot brings its own size.
	var buf bytes.Buffer
	s := f.clone()
	buf.Write(s.hdr.bytes())
	if err := s.tree.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	if err := g.Restore(nopCloser{bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	if n, _, s := (&Member{fsm: g}).counts(); n != n0+5 || s != s0+15 {
		t.Fatalf("restored: %d nodes, %d bytes; want %d, %d", n, s, n0+5, s0+15)
	}
}

// BenchmarkTreeQuotaRoom is the quota's admission of one setData, which
// every write that grows the tree passes on the member its client is on,
// while that member's FSM applies batches of 128 writes back to back (a
// follower under the write ×128 workload).
func BenchmarkTreeQuotaRoom(b *testing.B) {
	f := newFSM()
	m := &Member{fsm: f}
	acl := []tree.ACL{{Perms: tree.PermAll, Scheme: "world", ID: "anyone"}}
	create, err := (&tree.Txn{Kind: tree.TxnOps, Time: 1, Ops: []tree.Op{{Kind: tree.OpCreate, Path: "/n0", ACL: acl}}}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	f.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: create}})
	set, err := (&tree.Txn{Kind: tree.TxnOps, Time: 1, Ops: []tree.Op{{Kind: tree.OpSetData, Path: "/n0", Version: -1, Data: make([]byte, 100)}}}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]*raft.Log, 128)
	for i := range batch {
		batch[i] = &raft.Log{Type: raft.LogCommand, Data: set}
	}

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		index := uint64(3)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, l := range batch {
				l.Index = index
				index++
			}
			f.ApplyBatch(batch)
		}
	}()
	q := &treeQuota{maxNodes: defaultMaxTreeNodes, maxBytes: defaultMaxTreeBytes, counts: m.counts, log: slog.New(slog.DiscardHandler)}
	txn := &tree.Txn{Kind: tree.TxnOps, Ops: []tree.Op{{Kind: tree.OpSetData, Path: "/n0", Data: make([]byte, 100)}}}
	b.ResetTimer()
	for b.Loop() {
		if ok, _ := q.room(txn); !ok {
			b.Fatal("refused")
		}
	}
	b.StopTimer()
	close(stop)
	<-done
}
