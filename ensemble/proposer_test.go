package ensemble

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// soloRaft is a one-member raft over in-memory stores, leading, with f as
// its state machine.
func soloRaft(t *testing.T, f *fsm) *raft.Raft {
	t.Helper()
	rc := raft.DefaultConfig()
	rc.LocalID = "1"
	rc.Logger = hclog.NewNullLogger()
	rc.HeartbeatTimeout = 50 * time.Millisecond
	rc.ElectionTimeout = 50 * time.Millisecond
	rc.LeaderLeaseTimeout = 50 * time.Millisecond
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("1")
	if err := raft.BootstrapCluster(rc, store, store, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "1", Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(rc, f, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	select {
	case <-r.LeaderCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no leader")
	}
	return r
}

func waitDone(t *testing.T, q *queuedTxn, what string) applyResult {
	t.Helper()
	select {
	case <-q.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not answered", what)
	}
	res := q.res
	if q.err != nil {
		t.Fatalf("%s: %v", what, q.err)
	}
	if res.err != nil || res.res.Err != nil {
		t.Fatalf("%s: %v %v", what, res.err, res.res.Err)
	}
	return res
}

// A lone write goes to raft from its caller, without the forming
// goroutine; only the answering one is needed.
func TestProposerLoneWriteSkipsQueue(t *testing.T) {
	f := newFSM()
	r := soloRaft(t, f)
	p := newProposer(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"}))
	done := make(chan struct{})
	go func() { defer close(done); p.runAnswer() }()
	defer func() { close(p.pending); <-done }()
	ctx := context.Background()
	q, err := p.propose(ctx, createTxn(t, "/lone"))
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, q, "lone write")
	if res.zxid&(maxGroup-1) != 0 {
		t.Fatalf("zxid %#x: not the first of its entry", res.zxid)
	}
}

// A write proposed after one that queued (no slot was free) queues
// behind it, and the log keeps their order.
func TestProposerKeepsOrderBehindQueue(t *testing.T) {
	f := newFSM()
	r := soloRaft(t, f)
	p := newProposer(r, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"}))
	for range groupsInFlight {
		p.slots <- struct{}{} // every slot taken: the next write queues
	}
	ctx, cancel := context.WithCancel(context.Background())
	first, err := p.propose(ctx, createTxn(t, "/first"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.slots // a slot frees while first is still queued
	second, err := p.propose(ctx, createTxn(t, "/second"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.slots
	formed, answered := make(chan struct{}), make(chan struct{})
	go func() { defer close(formed); p.runForm(ctx) }()
	go func() { defer close(answered); p.runAnswer() }()
	defer func() { cancel(); <-formed; <-answered }()
	a, b := waitDone(t, first, "first"), waitDone(t, second, "second")
	if a.zxid >= b.zxid {
		t.Fatalf("first write's zxid %#x not below second's %#x", a.zxid, b.zxid)
	}
}
