package tree

import (
	"fmt"
	"testing"
)

// TestReadsDoNotAllocate guards the hot read path: the member serves most
// requests from Get and Exists.
func TestReadsDoNotAllocate(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/open", "data", 0))
	h.must(0, nil, createACL("/byip", []ACL{{Perms: PermAll, Scheme: "ip", ID: "10.0.0.0/8"}}))
	h.must(0, superAuth, createACL("/bydigest", aliceOnly))
	ipAuth := []Identity{{Scheme: "ip", ID: "10.1.2.3"}}
	for name, f := range map[string]func(){
		"Exists":     func() { _, _ = h.tree.Exists("/open") },
		"Get open":   func() { _, _, _ = h.tree.Get("/open", nil) },
		"Get ip":     func() { _, _, _ = h.tree.Get("/byip", ipAuth) },
		"Get digest": func() { _, _, _ = h.tree.Get("/bydigest", aliceAuth) },
		"Get absent": func() { _, _, _ = h.tree.Get("/absent", nil) },
		"CheckACL":   func() { _ = h.tree.CheckACL("/byip", PermWrite, ipAuth) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.1f times", name, n)
		}
	}
}

func BenchmarkApplyCreateDelete(b *testing.B) {
	tr := New()
	tr.Apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/bench", "", 0)}}, 1)
	paths := make([]string, 1024)
	for i := range paths {
		paths[i] = fmt.Sprintf("/bench/n%d", i)
	}
	create := &Txn{Kind: TxnOps, Ops: []Op{createOp("", "some data", 0)}}
	del := &Txn{Kind: TxnOps, Ops: []Op{deleteOp("", -1)}}
	zxid := int64(1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := paths[i%len(paths)]
		create.Ops[0].Path = p
		del.Ops[0].Path = p
		zxid++
		if r := tr.Apply(create, zxid); r.Err != nil {
			b.Fatal(r.Err)
		}
		zxid++
		if r := tr.Apply(del, zxid); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	tr := New()
	tr.Apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/bench", "some data", 0)}}, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tr.Get("/bench", nil); err != nil {
			b.Fatal(err)
		}
	}
}
