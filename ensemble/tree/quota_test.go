package tree

import (
	"bytes"
	"fmt"
	"testing"
)

// setQuota does what zkCli's setquota does on the wire: the quota path's
// parents under /zookeeper/quota, then the limits node and a zeroed stats
// node, which the tree fills in.
func (h *harness) setQuota(path, limits string) {
	h.t.Helper()
	q := quotaPath
	for _, name := range splitAll(path) {
		q += "/" + name
		if !h.exists(q) {
			h.must(0, noAuth, createOp(q, "", ModePersistent))
		}
	}
	h.must(0, noAuth, createOp(q+"/"+QuotaLimitNode, limits, ModePersistent))
	h.must(0, noAuth, createOp(q+"/"+QuotaStatNode, "count=0,bytes=0", ModePersistent))
}

func splitAll(p string) []string {
	var out []string
	for p != rootPath {
		parent, name := splitPath(p)
		out = append([]string{name}, out...)
		p = parent
	}
	return out
}

func (h *harness) quotaStats(path string) string {
	h.t.Helper()
	b, _, err := h.tree.Get(quotaStatPath(path), noAuth)
	if err != nil {
		h.t.Fatalf("stats of %s: %v", path, err)
	}
	return string(b)
}

func TestQuotaStatsFormat(t *testing.T) {
	for _, c := range []struct{ in, out string }{
		{"count=3,bytes=12", "count=3,bytes=12"},
		{"", "count=-1,bytes=-1"},
		// What zkCli 3.8 writes for setquota -N 5.
		{"count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=5", "count=-1,bytes=-1=;byteHardLimit=-1;countHardLimit=5"},
		{"countHardLimit=5;count=2,,bytes=", "count=2,bytes=-1=;countHardLimit=5"},
	} {
		s, ok := ParseQuotaStats([]byte(c.in))
		if !ok {
			t.Fatalf("%q: not parsed", c.in)
		}
		if got := string(s.Bytes()); got != c.out {
			t.Errorf("%q: formatted %q, want %q", c.in, got, c.out)
		}
	}
	s, _ := ParseQuotaStats([]byte("count=-1,bytes=-1=;byteHardLimit=7;countHardLimit=5"))
	if s.Get(QuotaCountHardLimit) != 5 || s.Get(QuotaByteHardLimit) != 7 || s.Get(QuotaCount) != -1 || s.Get("nope") != -1 {
		t.Errorf("parsed %v", s)
	}
	for _, bad := range []string{"count", "count=x", "count=1,bytes=2.5"} {
		if _, ok := ParseQuotaStats([]byte(bad)); ok {
			t.Errorf("%q parsed; ZooKeeper's parser throws", bad)
		}
	}
}

// TestQuotaStatsFollowWrites checks the stats node against ZooKeeper's
// DataTree bookkeeping: filled in when created, then moved by every
// create, delete and setData under the quota path, by nothing outside it,
// and by nothing once the quota is gone.
func TestQuotaStatsFollowWrites(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/a", "12345", ModePersistent))
	h.must(0, noAuth, createOp("/a/b", "xy", ModePersistent))
	h.must(0, noAuth, createOp("/ab", "not under /a", ModePersistent))
	h.setQuota("/a", "count=10,bytes=-1")
	want := func(s string) {
		t.Helper()
		if got := h.quotaStats("/a"); got != s {
			t.Fatalf("stats of /a: %q, want %q", got, s)
		}
	}
	want("count=2,bytes=7")
	st := h.stat(quotaStatPath("/a"))
	if st.Version != 0 || st.DataLength != int32(len("count=2,bytes=7")) {
		t.Fatalf("stats node's stat %+v: no version moves, the length follows the data", st)
	}
	h.must(0, noAuth, createOp("/a/b/c", "abc", ModePersistent))
	want("count=3,bytes=10")
	h.must(0, noAuth, setDataOp("/a/b", "", -1))
	want("count=3,bytes=8")
	h.must(0, noAuth, createOp("/ab/x", "zzzz", ModePersistent))
	h.must(0, noAuth, setDataOp("/ab", "", -1))
	want("count=3,bytes=8")
	h.must(0, noAuth, deleteOp("/a/b/c", -1))
	want("count=2,bytes=5")

	// An ephemeral under the quota counts until its session ends.
	s := h.session()
	h.must(s, noAuth, createOp("/a/e", "eph", ModeEphemeral))
	want("count=3,bytes=8")
	h.closeSession(s)
	want("count=2,bytes=5")

	// A multi that fails changes no stats; one that succeeds does.
	res := h.multi(0, noAuth, createOp("/a/m", "mm", ModePersistent), createOp("/nope/x", "", ModePersistent))
	wantErr(t, "failing multi", res.Err, ErrNoNode)
	want("count=2,bytes=5")
	h.multi(0, noAuth, createOp("/a/m", "mm", ModePersistent), setDataOp("/a/m", "m", -1))
	want("count=3,bytes=6")

	// Deleting the limits node ends the bookkeeping.
	h.must(0, noAuth, deleteOp(quotaLimitPath("/a"), -1))
	h.must(0, noAuth, createOp("/a/after", "x", ModePersistent))
	want("count=3,bytes=6")
}

// TestQuotaNested checks that the deepest quota path above a write is the
// one counted, as ZooKeeper's PathTrie.findMaxPrefix picks it.
func TestQuotaNested(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/a", "", ModePersistent))
	h.must(0, noAuth, createOp("/a/b", "", ModePersistent))
	h.setQuota("/a", "count=10,bytes=-1")
	h.setQuota("/a/b", "count=10,bytes=-1")
	h.must(0, noAuth, createOp("/a/b/c", "1", ModePersistent))
	h.must(0, noAuth, createOp("/a/c", "22", ModePersistent))
	if got := h.quotaStats("/a/b"); got != "count=2,bytes=1" {
		t.Errorf("stats of /a/b: %q", got)
	}
	if got := h.quotaStats("/a"); got != "count=3,bytes=2" {
		t.Errorf("stats of /a: %q (ZooKeeper counts the nested quota's nodes in neither after it is set)", got)
	}
}

func TestQuotaEnforced(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/q", "", ModePersistent))
	h.setQuota("/q", "count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=3")
	enforce := func(op Op) Result {
		return h.apply(&Txn{Kind: TxnOps, EnforceQuota: true, Ops: []Op{op}})
	}
	if r := enforce(createOp("/q/a", "12345", ModePersistent)); r.Err != nil {
		t.Fatal(r.Err)
	}
	// count: /q and /q/a; one more is the third and last.
	r := enforce(createOp("/q/b", "", ModePersistent))
	wantErr(t, "third node", r.Err, nil)
	r = enforce(createOp("/q/c", "", ModePersistent))
	wantErr(t, "fourth node", r.Err, ErrQuotaExceeded)
	if len(r.Quotas) != 1 || !r.Quotas[0].Hard || r.Quotas[0].String() != "Quota exceeded: /q [current count=4, hardCountLimit=3]" {
		t.Errorf("noted %v", r.Quotas)
	}
	// Existence and ACLs come first, as in ZooKeeper's create.
	wantErr(t, "existing node", enforce(createOp("/q/b", "", ModePersistent)).Err, ErrNodeExists)
	// setData: bytes 5 of 10; the quota is checked before the version.
	wantErr(t, "setData past bytes", enforce(setDataOp("/q/a", "12345678901", 7)).Err, ErrQuotaExceeded)
	wantErr(t, "setData within bytes, bad version", enforce(setDataOp("/q/a", "1234567890", 7)).Err, ErrBadVersion)
	wantErr(t, "setData within bytes", enforce(setDataOp("/q/a", "1234567890", -1)).Err, nil)
	// Without enforcement the same writes pass and the stats go past.
	h.must(0, noAuth, createOp("/q/c", "x", ModePersistent))
	if got := h.quotaStats("/q"); got != "count=4,bytes=11" {
		t.Errorf("stats %q", got)
	}
	// Deletes always pass.
	wantErr(t, "delete", enforce(deleteOp("/q/c", -1)).Err, nil)
	if got := h.quotaStats("/q"); got != "count=3,bytes=10" {
		t.Errorf("stats %q", got)
	}
}

// TestQuotaEnforcedMultiSeesCommittedStats: ZooKeeper checks each op of a
// multi against the committed tree, so two creates that each fit pass
// together even where both do not.
func TestQuotaEnforcedMultiSeesCommittedStats(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/q", "", ModePersistent))
	h.setQuota("/q", "count=-1,bytes=-1=;countHardLimit=2")
	r := h.apply(&Txn{Kind: TxnOps, EnforceQuota: true, Multi: true, Ops: []Op{
		createOp("/q/a", "", ModePersistent), createOp("/q/b", "", ModePersistent)}})
	wantErr(t, "multi", r.Err, nil)
	if got := h.quotaStats("/q"); got != "count=3,bytes=0" {
		t.Errorf("stats %q", got)
	}
}

func TestQuotaSoftLimitNotedNotRefused(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/q", "", ModePersistent))
	h.setQuota("/q", "count=1,bytes=2")
	r := h.apply(&Txn{Kind: TxnOps, EnforceQuota: true, Ops: []Op{createOp("/q/a", "abc", ModePersistent)}})
	wantErr(t, "soft", r.Err, nil)
	if len(r.Quotas) != 2 || r.Quotas[0].Hard || r.Quotas[1].String() != "Quota exceeded: /q [current bytes=3, softByteLimit=2]" {
		t.Errorf("noted %v", r.Quotas)
	}
}

// TestQuotaSnapshot: a restored tree keeps the stats and goes on counting;
// a snapshot written before quotas existed loads with none.
func TestQuotaSnapshot(t *testing.T) {
	h := newHarness(t)
	h.must(0, noAuth, createOp("/a", "1", ModePersistent))
	h.setQuota("/a", "count=5,bytes=-1")
	h.must(0, noAuth, createOp("/a/b", "22", ModePersistent))
	h.tree = clone(t, h.tree)
	h.must(0, noAuth, createOp("/a/c", "333", ModePersistent))
	if got := h.quotaStats("/a"); got != "count=3,bytes=6" {
		t.Errorf("stats after restore: %q", got)
	}
	c := h.tree.Clone()
	h.must(0, noAuth, deleteOp("/a/c", -1))
	c.Apply(&Txn{Kind: TxnOps, Ops: []Op{deleteOp("/a/c", -1)}}, h.zxid)
	if !c.Equal(h.tree) {
		t.Error("a clone counts differently")
	}

	var buf bytes.Buffer
	if err := New().WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	old, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(old.quotas) != 0 {
		t.Errorf("quotas %v from a tree without any", old.quotas)
	}
}

func TestQuotaTxnFlagRoundTrip(t *testing.T) {
	for _, on := range []bool{false, true} {
		in := Txn{Kind: TxnOps, EnforceQuota: on, Ops: []Op{createOp("/a", "", ModePersistent)}}
		b, err := in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var out Txn
		if err := out.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if out.EnforceQuota != on {
			t.Errorf("EnforceQuota %v came back %v", on, out.EnforceQuota)
		}
		if !on && b[2+2] != 0 {
			// version, kind, session 0, time 0, then the flags
			t.Errorf("flags byte %d without enforcement", b[4])
		}
	}
}

// TestQuotaOnZookeeper: ZooKeeper takes a quota on /zookeeper and counts
// its own quota nodes there, the new stats node twice (once when it is
// filled in, once as a node created under the quota), with the bytes the
// create wrote.
func TestQuotaOnZookeeper(t *testing.T) {
	h := newHarness(t)
	h.setQuota(procPath, "count=100,bytes=-1")
	// /zookeeper, quota, config, quota/zookeeper, its limits and stats,
	// the stats again; bytes: the limits and twice the stats' created
	// data "count=0,bytes=0" (counted before it was filled in, and again).
	limits, stats := len("count=100,bytes=-1"), len("count=0,bytes=0")
	want := QuotaStats{QuotaCount: 7, QuotaBytes: int64(limits + 2*stats)}
	if got := h.quotaStats(procPath); got != string(want.Bytes()) {
		t.Errorf("stats of /zookeeper: %q, want %q", got, want.Bytes())
	}
}

// BenchmarkApplyUnderQuota is BenchmarkApplyCreateDelete's pair of writes
// with /bench under a quota with hard limits, enforced: each write
// rewrites the stats node and checks the limits.
func BenchmarkApplyUnderQuota(b *testing.B) {
	tr := New()
	zxid := int64(1)
	apply := func(op Op) {
		zxid++
		if r := tr.Apply(&Txn{Kind: TxnOps, Ops: []Op{op}}, zxid); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	apply(createOp("/bench", "", 0))
	apply(createOp("/zookeeper/quota/bench", "", 0))
	apply(createOp("/zookeeper/quota/bench/"+QuotaLimitNode, "count=-1,bytes=-1=;byteHardLimit=1000000;countHardLimit=100000", 0))
	apply(createOp("/zookeeper/quota/bench/"+QuotaStatNode, "count=0,bytes=0", 0))
	paths := make([]string, 1024)
	for i := range paths {
		paths[i] = fmt.Sprintf("/bench/n%d", i)
	}
	create := &Txn{Kind: TxnOps, EnforceQuota: true, Ops: []Op{createOp("", "some data", 0)}}
	del := &Txn{Kind: TxnOps, EnforceQuota: true, Ops: []Op{deleteOp("", -1)}}
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
