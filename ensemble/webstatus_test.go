package ensemble

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The status page's latency histogram is the request histogram summed
// over every op: cumulative, ending in +Inf with every request.
func TestPageLatencyBuckets(t *testing.T) {
	s := newRequestStats()
	for range 3 {
		s.observe(wire.OpGetData, 2*time.Millisecond)
	}
	s.observe(wire.OpCreate, 20*time.Millisecond)
	if n := latencyCount(s.latency); n != 4 {
		t.Errorf("%d requests counted, want 4", n)
	}
	b := latencyBuckets(s.latency)
	if len(b) != len(requestBuckets)+1 || !math.IsInf(b[len(b)-1].Le, 1) || b[len(b)-1].Count != 4 {
		t.Fatalf("buckets %+v", b)
	}
	for i, x := range b {
		switch {
		case i > 0 && x.Count < b[i-1].Count:
			t.Errorf("bucket %d (%v) below the one before: %+v", i, x.Le, b)
		case x.Le == 0.0025 && x.Count != 3, x.Le == 0.025 && x.Count != 4:
			t.Errorf("at most %vs: %d requests", x.Le, x.Count)
		}
	}
}

// treeSource is a status page Source over a bare tree, read the way the
// member's is (pageTree), without raft or a network.
type treeSource struct {
	mu sync.RWMutex // guards t, as the FSM's lock does
	t  *tree.Tree
}

func (s *treeSource) ID() string                                         { return "1" }
func (s *treeSource) Ensemble(context.Context) []statuspage.MemberReport { return nil }
func (s *treeSource) Counters() statuspage.Counters                      { return statuspage.Counters{} }
func (s *treeSource) Session(int64) statuspage.SessionState              { return statuspage.SessionState{} }
func (s *treeSource) ReadTree(fn func(statuspage.Tree)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(pageTree{s.t})
}

// lockRootTree is a tree with n empty lock folders under the default
// lock root.
func lockRootTree(tb testing.TB, n int) *tree.Tree {
	tb.Helper()
	t := tree.New()
	zxid := int64(1)
	apply := func(ops []tree.Op) {
		zxid++
		if r := t.Apply(&tree.Txn{Kind: tree.TxnOps, Multi: true, Time: 1_700_000_000_000, Ops: ops}, zxid); r.Err != nil {
			tb.Fatal(r.Err)
		}
	}
	apply([]tree.Op{{Kind: tree.OpCreate, Path: "/coordrun", ACL: tree.OpenACL}, {Kind: tree.OpCreate, Path: statuspage.DefaultLockRoot, ACL: tree.OpenACL}})
	for i := 0; i < n; i += 2000 {
		var ops []tree.Op
		for j := i; j < min(i+2000, n); j++ {
			ops = append(ops, tree.Op{Kind: tree.OpCreate, Path: fmt.Sprintf("%s/job-%07d", statuspage.DefaultLockRoot, j), ACL: tree.OpenACL})
		}
		apply(ops)
	}
	return t
}

// TestPageLockRootRealTree: the page over the member's own tree with
// 200,000 children under the lock root shows the first 500, and a read
// of the unchanged root allocates far less than the 3.2 MB that
// collecting the names alone took.
func TestPageLockRootRealTree(t *testing.T) {
	src := &treeSource{t: lockRootTree(t, 200_000)}
	h := statuspage.New(src, statuspage.Options{}).Handler()
	get := func() statuspage.LocksView {
		r := httptest.NewRequest(http.MethodGet, "/api/locks", nil)
		r.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var v statuspage.LocksView
		if err := json.Unmarshal(w.Body.Bytes(), &v); w.Code != 200 || err != nil {
			t.Fatalf("/api/locks: %d %v", w.Code, err)
		}
		return v
	}
	v := get()
	if len(v.Locks) != 500 || v.Locks[0].Name != "job-0000000" || v.Locks[499].Name != "job-0000499" || !strings.HasPrefix(v.Error, "200000 locks") {
		t.Fatalf("%d locks, error %q", len(v.Locks), v.Error)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	get()
	runtime.ReadMemStats(&after)
	if b := after.TotalAlloc - before.TotalAlloc; b > 2<<20 {
		t.Errorf("reading the unchanged lock root allocated %d bytes, want under 2 MiB", b)
	}
}

// BenchmarkPageLockRoot: /api/locks over 200,000 lock folders; the root
// unchanged between reads (what the broadcaster meets every second), and
// changed before each (its names then read again at most every 5 s; one
// such read is BenchmarkFirstChildrenLarge in ensemble/tree).
func BenchmarkPageLockRoot(b *testing.B) {
	src := &treeSource{t: lockRootTree(b, 200_000)}
	for _, changed := range []bool{false, true} {
		b.Run(fmt.Sprintf("changed=%v", changed), func(b *testing.B) {
			h := statuspage.New(src, statuspage.Options{}).Handler()
			zxid := int64(1 << 40)
			b.ReportAllocs()
			for b.Loop() {
				if changed {
					b.StopTimer()
					zxid++
					op := tree.Op{Kind: tree.OpCreate, Path: fmt.Sprintf("%s/new-%d", statuspage.DefaultLockRoot, zxid), ACL: tree.OpenACL}
					src.t.Apply(&tree.Txn{Kind: tree.TxnOps, Time: 1_700_000_000_000, Ops: []tree.Op{op}}, zxid)
					b.StartTimer()
				}
				r := httptest.NewRequest(http.MethodGet, "/api/locks", nil)
				r.RemoteAddr = "127.0.0.1:1"
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}
