package ensemble

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/raft"
)

func TestGroupEntryCodec(t *testing.T) {
	txns := []*queuedTxn{{data: []byte("one")}, {data: nil}, {data: bytes.Repeat([]byte{7}, 300)}}
	b := encodeGroup(txns)
	if !isGroup(b) {
		t.Fatal("encoded group not recognised")
	}
	got, err := decodeGroup(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(txns) {
		t.Fatalf("%d txns decoded, want %d", len(got), len(txns))
	}
	for i := range got {
		if !bytes.Equal(got[i], txns[i].data) {
			t.Errorf("txn %d: %q, want %q", i, got[i], txns[i].data)
		}
	}
	// A single txn's encoding is never taken for a group.
	single, _ := (&tree.Txn{Kind: tree.TxnOps, Ops: []tree.Op{{Kind: tree.OpDelete, Path: "/a"}}}).MarshalBinary()
	if isGroup(single) {
		t.Fatal("a txn's encoding starts with the group tag")
	}
	bad := map[string][]byte{
		"not a group":   single,
		"no count":      {groupTag},
		"count too big": append([]byte{groupTag}, 0x81, 0x02), // 257
		"truncated":     b[:len(b)-1],
		"trailing":      append(append([]byte{}, b...), 0),
		"length beyond": {groupTag, 1, 9, 'x'},
	}
	for name, data := range bad {
		if _, err := decodeGroup(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// createTxn is an encoded txn creating path.
func createTxn(t *testing.T, path string) []byte {
	t.Helper()
	b, err := (&tree.Txn{Kind: tree.TxnOps, Time: 1, Ops: []tree.Op{{
		Kind: tree.OpCreate, Path: path, ACL: []tree.ACL{{Perms: tree.PermAll, Scheme: "world", ID: "anyone"}},
	}}}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFSMGroupZxids(t *testing.T) {
	f := newFSM()
	group := encodeGroup([]*queuedTxn{{data: createTxn(t, "/g0")}, {data: createTxn(t, "/g1")}, {data: createTxn(t, "/g2")}})
	logs := []*raft.Log{
		{Index: 3, Term: 1, Type: raft.LogCommand, Data: createTxn(t, "/before")},
		{Index: 4, Term: 1, Type: raft.LogNoop},
		{Index: 5, Term: 1, Type: raft.LogCommand, Data: group},
		{Index: 6, Term: 1, Type: raft.LogCommand, Data: createTxn(t, "/after")},
	}
	var batches [][2]uint64
	f.afterBatch = func(index, term uint64) { batches = append(batches, [2]uint64{index, term}) }
	out := f.ApplyBatch(logs[:1])
	if r := out[0].(applyResult); r.zxid != 3 || r.err != nil || f.grouped.Load() {
		t.Fatalf("single entry before any group: zxid %d err %v grouped %v, want zxid 3 ungrouped", r.zxid, r.err, f.grouped.Load())
	}
	out = f.ApplyBatch(logs[1:])
	box, ok := out[1].(*groupApplied)
	if !ok {
		t.Fatalf("group entry's result %T %v", out[1], out[1])
	}
	rs := groupResults(box, 3)
	if len(rs) != 3 {
		t.Fatalf("group entry's results %v", rs)
	}
	// Taken once: raft's log cache keeps the box, not the results.
	if box.results != nil {
		t.Fatal("group results still in the apply's response after they were taken")
	}
	for k, r := range rs {
		if want := int64(5)<<zxidShift | int64(k); r.zxid != want || r.err != nil || r.res.Err != nil {
			t.Errorf("group txn %d: zxid %#x err %v/%v, want zxid %#x", k, r.zxid, r.err, r.res.Err, want)
		}
	}
	after := out[2].(applyResult)
	if want := int64(6) << zxidShift; after.zxid != want {
		t.Errorf("single entry after the group: zxid %#x, want %#x", after.zxid, want)
	}
	if f.lastZxid() != after.zxid || !f.grouped.Load() {
		t.Errorf("applied %#x grouped %v", f.lastZxid(), f.grouped.Load())
	}
	if len(batches) != 2 || batches[1] != [2]uint64{6, 1} {
		t.Errorf("afterBatch saw %v, want the raft index of each batch's last command", batches)
	}
	var czxids []int64
	f.view(func(tr *tree.Tree, _ int64) {
		for _, p := range []string{"/before", "/g0", "/g1", "/g2", "/after"} {
			st, err := tr.Exists(p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			czxids = append(czxids, st.Czxid)
		}
	})
	for i := 1; i < len(czxids); i++ {
		if czxids[i] <= czxids[i-1] {
			t.Fatalf("czxids not rising across the switch: %v", czxids)
		}
	}

	// The snapshot keeps the mode; a restored FSM goes on grouped.
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
	if !g.grouped.Load() || g.lastZxid() != f.lastZxid() {
		t.Fatalf("restored: grouped %v zxid %#x, want grouped at %#x", g.grouped.Load(), g.lastZxid(), f.lastZxid())
	}
	r := g.ApplyBatch([]*raft.Log{{Index: 7, Term: 2, Type: raft.LogCommand, Data: createTxn(t, "/later")}})[0].(applyResult)
	if r.zxid != 7<<zxidShift {
		t.Errorf("after restore: zxid %#x, want %#x", r.zxid, 7<<zxidShift)
	}

	// An empty group switches the mode and takes no zxid, and its batch
	// still reaches afterBatch (the commit pusher).
	e := newFSM()
	var pushed []uint64
	e.afterBatch = func(index, _ uint64) { pushed = append(pushed, index) }
	e.ApplyBatch([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: createTxn(t, "/x")}})
	e.ApplyBatch([]*raft.Log{{Index: 5, Type: raft.LogCommand, Data: encodeGroup(nil)}})
	if !e.grouped.Load() || e.lastZxid() != 4 {
		t.Errorf("empty group: grouped %v zxid %#x, want grouped at 4", e.grouped.Load(), e.lastZxid())
	}
	if !slices.Equal(pushed, []uint64{4, 5}) {
		t.Errorf("afterBatch saw %v, want [4 5]", pushed)
	}

	// A group that cannot be decoded is skipped alike everywhere, and
	// still switches the mode.
	h := newFSM()
	r = h.ApplyBatch([]*raft.Log{{Index: 9, Type: raft.LogCommand, Data: []byte{groupTag, 2, 1}}})[0].(applyResult)
	if r.err == nil || !h.grouped.Load() || h.lastZxid() != 9<<zxidShift {
		t.Errorf("undecodable group: err %v grouped %v zxid %#x", r.err, h.grouped.Load(), h.lastZxid())
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestSnapHeader(t *testing.T) {
	for _, h := range []snapHeader{{zxid: 0}, {zxid: 42}, {zxid: 42 << zxidShift, grouped: true}} {
		got, err := readSnapHeader(bytes.NewReader(h.bytes()))
		if err != nil || got != h {
			t.Errorf("%+v read back as %+v, %v", h, got, err)
		}
	}
	// The format before group commit: the zxid alone.
	old := []byte{0, 0, 0, 0, 0, 0, 0x12, 0x34}
	if got, err := readSnapHeader(bytes.NewReader(old)); err != nil || got != (snapHeader{zxid: 0x1234}) {
		t.Errorf("old header read as %+v, %v", got, err)
	}
	for name, b := range map[string][]byte{
		"unknown magic": {0xFF, 0, 0, 0, 0, 0, 0, 1},
		"short":         {0, 1},
		"magic alone":   (snapHeader{grouped: true}).bytes()[:8],
		"negative zxid": append((snapHeader{grouped: true}).bytes()[:8], 0x80, 0, 0, 0, 0, 0, 0, 0),
	} {
		if _, err := readSnapHeader(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: read", name)
		}
	}
}

// groupedEverywhere waits until every running member has applied a group
// entry.
func groupedEverywhere(c *cluster) func() bool {
	return func() bool {
		for _, m := range c.Members() {
			if !m.fsm.grouped.Load() {
				return false
			}
		}
		return true
	}
}

// concurrentCreates creates n nodes under dir from w sessions at once and
// returns how many raft entries the leader's log grew by meanwhile.
func concurrentCreates(t *testing.T, c *cluster, dir string, w, n int) (entries uint64) {
	t.Helper()
	conns := make([]*zk.Conn, w)
	for i := range conns {
		conns[i] = testkit.DialZK(t, c.Servers(), 4*time.Second)
	}
	before := c.waitLeader().raft.LastIndex()
	var wg sync.WaitGroup
	errs := make(chan error, w)
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; k < n; k += w {
				if _, err := conn.Create(fmt.Sprintf("%s/n%04d", dir, k), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return c.waitLeader().raft.LastIndex() - before
}

// TestGroupCommitGate runs an ensemble with one member of the version
// before group commit: nothing is grouped, and zxids are raft indices.
// Once that member is upgraded (restarted as the current version), the
// leader groups; zxids jump above the old ones and keep rising, and a
// burst of concurrent writes takes far fewer raft entries than writes.
func TestGroupCommitGate(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.legacyEntries = cfg.ID == "3" })
	conn := testkit.DialZK(t, c.Servers(), 4*time.Second)
	if _, err := conn.Create("/g", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const writers, writes = 16, 400
	entries := concurrentCreates(t, c, "/g", writers, writes)
	for i, m := range c.Members() {
		if m.fsm.grouped.Load() {
			t.Fatalf("member %d grouped with an old member in the ensemble", i)
		}
	}
	if entries < writes {
		t.Fatalf("%d writes in %d raft entries with an old member present", writes, entries)
	}
	if _, err := conn.Sync("/g"); err != nil {
		t.Fatal(err)
	}
	_, st, err := conn.Get("/g/n0000")
	if err != nil {
		t.Fatal(err)
	}
	oldZxid := st.Czxid
	if idx := int64(c.waitLeader().raft.LastIndex()); oldZxid > idx {
		t.Fatalf("czxid %d above the raft index %d before grouping", oldZxid, idx)
	}

	// The old member is upgraded.
	const old = 2
	c.cfgs[old].legacyEntries = false
	c.Stop(old)
	c.Restart(t, old)
	testkit.WaitFor(t, 15*time.Second, "every member to apply a group entry", groupedEverywhere(c))

	if _, err := conn.Create("/h", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	entries = concurrentCreates(t, c, "/h", writers, writes)
	t.Logf("grouped: %d concurrent writes from %d sessions in %d raft entries", writes, writers, entries)
	if entries >= writes/2 {
		t.Errorf("%d concurrent writes took %d raft entries: not grouped", writes, entries)
	}
	// The writers' sessions are on other members than conn's, whose
	// reads are local: catch it up first.
	if _, err := conn.Sync("/h"); err != nil {
		t.Fatal(err)
	}
	children, _, err := conn.Children("/h")
	if err != nil || len(children) != writes {
		t.Fatalf("/h has %d children (%v), want %d", len(children), err, writes)
	}
	seen := map[int64]string{}
	for _, ch := range children {
		_, st, err := conn.Get("/h/" + ch)
		if err != nil {
			t.Fatal(err)
		}
		if st.Czxid <= oldZxid {
			t.Fatalf("%s: czxid %#x not above the ungrouped %#x", ch, st.Czxid, oldZxid)
		}
		if other, dup := seen[st.Czxid]; dup {
			t.Fatalf("%s and %s share czxid %#x", ch, other, st.Czxid)
		}
		seen[st.Czxid] = ch
	}
	// Every member applied the same zxids.
	testkit.WaitFor(t, 5*time.Second, "the members to agree on the last zxid", func() bool {
		z := c.Member(0).LastZxid()
		return c.Member(1).LastZxid() == z && c.Member(2).LastZxid() == z
	})
}

// TestGroupCommitRefusesOldMember: once grouped, an ensemble will not add
// a member that cannot read group entries.
func TestGroupCommitRefusesOldMember(t *testing.T) {
	c := startCluster(t, 1)
	testkit.WaitFor(t, 10*time.Second, "the lone member to group", func() bool {
		conn := testkit.DialZK(t, c.Servers(), 4*time.Second)
		defer conn.Close()
		_, err := conn.Create("/x", nil, zk.FlagSequence, zk.WorldACL(zk.PermAll))
		return err == nil && c.Member(0).fsm.grouped.Load()
	})
	dir := t.TempDir()
	oldm, err := Start(Config{ID: "old", DataDir: dir, ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", Join: true, PeerSecret: c.cfgs[0].PeerSecret,
		Logger: testkit.Logger("old"), HeartbeatTimeout: testkit.HeartbeatTimeout, ElectionTimeout: testkit.ElectionTimeout, legacyEntries: true})
	if err != nil {
		t.Fatal(err)
	}
	defer oldm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Member(0).applyChange(ctx, memberChange{add: []Peer{{ID: "old", Addr: oldm.PeerAddr()}}})
	if !errors.Is(err, errBadChange) || !strings.Contains(err.Error(), "upgrade it") {
		t.Fatalf("adding an old member: %v, want it refused", err)
	}
	if n := len(c.Member(0).raft.GetConfiguration().Configuration().Servers); n != 1 {
		t.Fatalf("%d servers in the configuration after the refusal", n)
	}
}

// TestGroupWritesMetric: the leader counts the writes of each group it
// proposes, so the histogram's sum is the writes it proposed.
func TestGroupWritesMetric(t *testing.T) {
	c := startCluster(t, 1)
	m := c.Member(0)
	testkit.WaitFor(t, 10*time.Second, "the lone member to group", m.fsm.grouped.Load)
	conn := testkit.DialZK(t, c.Servers(), 4*time.Second)
	before := histogramSum(t, m, "coordrun_group_writes")
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := conn.Create(fmt.Sprintf("/w%d", i), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	if got := histogramSum(t, m, "coordrun_group_writes") - before; got != n {
		t.Fatalf("coordrun_group_writes grew by %v over %d writes", got, n)
	}
}

func histogramSum(t *testing.T, m *Member, name string) float64 {
	t.Helper()
	mfs, err := m.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}

// TestHandshakeOutlastsNoLeader: a new session asked for while the
// ensemble has no quorum is created once it has one again, within a third
// of its timeout, rather than the connection being closed when the
// member's own wait for a leader runs out.
func TestHandshakeOutlastsNoLeader(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.MaxSessionTimeout = 30 * time.Second })
	c.Stop(1)
	c.Stop(2)
	nc := rawDial(t, c.ClientAddr(0))
	if _, err := nc.Write(encodeFrame(&wire.ConnectRequest{Timeout: 24000, Passwd: make([]byte, 16)})); err != nil {
		t.Fatal(err)
	}
	// The scenario, not a wait for a condition: the quorum comes back
	// only after the member's wait for a leader (four election timeouts)
	// has run out once.
	<-time.After(5 * testkit.ElectionTimeout)
	c.Restart(t, 1)
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	frame, err := wire.ReadFrame(bufio.NewReader(nc), nil, 1<<20)
	if err != nil {
		t.Fatalf("no session: %v", err)
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(frame)); err != nil || resp.SessionID == 0 {
		t.Fatalf("connect response %+v, %v", resp, err)
	}
}
