package tree

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// FirstChildren against the naive model: sort every name, keep the first
// n.
func TestFirstChildrenModel(t *testing.T) {
	reverse := func(a, b string) int { return strings.Compare(b, a) }
	byLen := func(a, b string) int { // not a name order, ties broken by name
		if c := len(a) - len(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		set := map[string]struct{}{}
		for range rng.IntN(60) {
			set[fmt.Sprintf("n%d", rng.IntN(1000))] = struct{}{}
		}
		n := rng.IntN(70)
		for name, cmp := range map[string]func(a, b string) int{"name": nil, "reverse": reverse, "length": byLen} {
			want := slices.Collect(func(yield func(string) bool) {
				for k := range set {
					if !yield(k) {
						return
					}
				}
			})
			if cmp == nil {
				slices.Sort(want)
			} else {
				slices.SortFunc(want, cmp)
			}
			want = want[:min(n, len(want))]
			if got := firstNames(set, n, cmp); !slices.Equal(got, want) {
				t.Fatalf("round %d, %s order, n=%d of %d: %v, want %v", round, name, n, len(set), got, want)
			}
		}
	}
}

func TestFirstChildrenErrors(t *testing.T) {
	h := newHarness(t)
	h.must(0, superAuth, createACL("/closed", aliceOnly))
	h.must(0, aliceAuth, createOp("/closed/a", "", 0))
	if _, _, err := h.tree.FirstChildren("/absent", nil, 5, nil); !errors.Is(err, ErrNoNode) {
		t.Errorf("absent: %v", err)
	}
	if _, _, err := h.tree.FirstChildren("/closed", nil, 5, nil); !errors.Is(err, ErrNoAuth) {
		t.Errorf("closed without credentials: %v", err)
	}
	kids, st, err := h.tree.FirstChildren("/closed", aliceAuth, 5, nil)
	if err != nil || !slices.Equal(kids, []string{"a"}) || st.NumChildren != 1 {
		t.Errorf("closed as alice: %v %+v %v", kids, st, err)
	}
}

// bigFolder is a tree with n children under /locks, created without the
// per-txn Check (which walks the whole tree).
func bigFolder(tb testing.TB, n int) *Tree {
	tb.Helper()
	tr := New()
	zxid := int64(1)
	tr.Apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/locks", "", 0)}}, zxid)
	for i := 0; i < n; i += 1000 {
		txn := &Txn{Kind: TxnOps, Multi: true, Time: baseTime}
		for j := i; j < min(i+1000, n); j++ {
			txn.Ops = append(txn.Ops, createOp(fmt.Sprintf("/locks/job-%07d", (j*7919)%n), "", 0))
		}
		zxid++
		if r := tr.Apply(txn, zxid); r.Err != nil {
			tb.Fatal(r.Err)
		}
	}
	return tr
}

// TestFirstChildrenBounded: reading the first 500 names of a folder of
// 200,000 allocates for those 500, not for all of them (Children takes
// megabytes), and gives the same names as Children's first 500.
func TestFirstChildrenBounded(t *testing.T) {
	const children, n = 200_000, 500
	tr := bigFolder(t, children)
	all, _, err := tr.Children("/locks", nil)
	if err != nil || len(all) != children {
		t.Fatalf("Children: %d, %v", len(all), err)
	}
	first, st, err := tr.FirstChildren("/locks", nil, n, nil)
	if err != nil || st.NumChildren != children || !slices.Equal(first, all[:n]) {
		t.Fatalf("FirstChildren: %d names (%v ...), NumChildren %d, %v", len(first), first[:min(3, len(first))], st.NumChildren, err)
	}
	bytes := allocated(func() { _, _, _ = tr.FirstChildren("/locks", nil, n, nil) })
	if limit := uint64(n * 16 * 2); bytes > limit {
		t.Errorf("FirstChildren of %d names out of %d allocated %d bytes, want at most %d", n, children, bytes, limit)
	}
}

// allocated is the heap bytes one call of f allocates, averaged over a
// few calls.
func allocated(f func()) uint64 {
	const runs = 5
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// BenchmarkChildrenLarge and BenchmarkFirstChildrenLarge: the status
// page's read of a lock root of 200,000 children, before and after.
func BenchmarkChildrenLarge(b *testing.B) {
	tr := bigFolder(b, 200_000)
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = tr.Children("/locks", nil)
	}
}

func BenchmarkFirstChildrenLarge(b *testing.B) {
	tr := bigFolder(b, 200_000)
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = tr.FirstChildren("/locks", nil, 500, nil)
	}
}
