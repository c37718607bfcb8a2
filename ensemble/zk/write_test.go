package zk_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// The flags of a create map to the tree's modes one to one, and a node
// created with each mode is what the flag means: ephemeral flags give the
// session's node, sequential ones a numbered name, TTL ones are refused.
func TestCreateMode(t *testing.T) {
	for _, c := range []struct {
		flags      int32
		mode       tree.Mode
		ephemeral  bool
		sequential bool
		container  bool
		refused    wire.Code
	}{
		{flags: wire.FlagPersistent, mode: tree.ModePersistent},
		{flags: wire.FlagEphemeral, mode: tree.ModeEphemeral, ephemeral: true},
		{flags: wire.FlagPersistentSequential, mode: tree.ModePersistentSequential, sequential: true},
		{flags: wire.FlagEphemeralSequential, mode: tree.ModeEphemeralSequential, ephemeral: true, sequential: true},
		{flags: wire.FlagContainer, mode: tree.ModeContainer, container: true},
		{flags: wire.FlagPersistentWithTTL, mode: tree.ModePersistentTTL, refused: wire.ErrUnimplemented},
		{flags: wire.FlagPersistentSequentialWithTTL, mode: tree.ModePersistentSequentialTTL, refused: wire.ErrUnimplemented},
	} {
		mode, ok := zk.CreateMode(c.flags)
		if !ok || mode != c.mode {
			t.Errorf("CreateMode(%d) = %d, %v; want %d", c.flags, mode, ok, c.mode)
			continue
		}
		f := newFixture(t)
		s := f.session()
		op := wire.OpCreate2
		if c.container {
			op = wire.OpCreateContainer
		}
		h, d := f.write(s, op, &wire.CreateRequest{Path: "/n", ACL: open, Flags: c.flags})
		if h.Err != c.refused {
			t.Errorf("create with flags %d: %v, want %v", c.flags, h.Err, c.refused)
			continue
		}
		if c.refused != wire.OK {
			continue
		}
		var cr wire.Create2Response
		if err := cr.Decode(d); err != nil {
			t.Fatal(err)
		}
		wantPath := "/n"
		if c.sequential {
			wantPath = "/n0000000000" // the initial nodes bump no cversion
		}
		if cr.Path != wantPath {
			t.Errorf("flags %d: path %q, want %q", c.flags, cr.Path, wantPath)
		}
		if got := cr.Stat.EphemeralOwner == s.ID; got != c.ephemeral {
			t.Errorf("flags %d: ephemeral owner %d, session %d", c.flags, cr.Stat.EphemeralOwner, s.ID)
		}
	}
	for _, flags := range []int32{-1, 7, 1 << 20} {
		if _, ok := zk.CreateMode(flags); ok {
			t.Errorf("CreateMode(%d) accepted flags ZooKeeper does not define", flags)
		}
	}
}

// Writes refused on their own terms fail with ZooKeeper's precedence among
// their faults: through the log as a failing op, since ZooKeeper gives the
// refusal a zxid of its own, except data over the limit, answered at once.
func TestPlanWriteEarly(t *testing.T) {
	big := make([]byte, limits.MaxData+1)
	for _, c := range []struct {
		name string
		op   int32
		body encodable
		want wire.Code // OK: the plan has a transaction
	}{
		{"create", wire.OpCreate, &wire.CreateRequest{Path: "/a", ACL: open}, wire.OK},
		{"create of a relative path", wire.OpCreate, &wire.CreateRequest{Path: "a", ACL: open}, wire.ErrBadArguments},
		{"create of a path without a slash", wire.OpCreate, &wire.CreateRequest{Path: "", ACL: open}, wire.ErrBadArguments},
		{"create of a path with a NUL", wire.OpCreate, &wire.CreateRequest{Path: "/a\x00", ACL: open}, wire.ErrBadArguments},
		// The rest of the path is checked after its parent: by the tree.
		{"create ending in /", wire.OpCreate, &wire.CreateRequest{Path: "/a/", ACL: open}, wire.OK},
		{"sequential create ending in /", wire.OpCreate, &wire.CreateRequest{Path: "/a/", ACL: open, Flags: wire.FlagPersistentSequential}, wire.OK},
		{"create of too much data", wire.OpCreate, &wire.CreateRequest{Path: "/a", Data: big, ACL: open}, wire.ErrBadArguments},
		{"create with undefined flags", wire.OpCreate, &wire.CreateRequest{Path: "/a", ACL: open, Flags: 7}, wire.ErrBadArguments},
		{"TTL flags before a bad path", wire.OpCreate, &wire.CreateRequest{Path: "a", ACL: open, Flags: wire.FlagPersistentWithTTL}, wire.ErrUnimplemented},
		{"TTL opcode and mode before anything", wire.OpCreateTTL, &wire.CreateTTLRequest{Path: "a", Data: big, ACL: open, Flags: wire.FlagPersistentWithTTL, TTL: 1}, wire.ErrUnimplemented},
		{"TTL opcode, sequential TTL mode", wire.OpCreateTTL, &wire.CreateTTLRequest{Path: "/a", ACL: open, Flags: wire.FlagPersistentSequentialWithTTL, TTL: 1}, wire.ErrUnimplemented},
		{"TTL opcode with an unknown mode", wire.OpCreateTTL, &wire.CreateTTLRequest{Path: "a", Data: big, ACL: open, Flags: 9, TTL: 1}, wire.ErrBadArguments},
		{"TTL opcode with plain flags", wire.OpCreateTTL, &wire.CreateTTLRequest{Path: "/a", ACL: open, TTL: 1}, wire.ErrBadArguments},
		{"createContainer without the container flag", wire.OpCreateContainer, &wire.CreateRequest{Path: "/a", ACL: open}, wire.ErrBadArguments},
		{"createContainer with TTL flags", wire.OpCreateContainer, &wire.CreateRequest{Path: "/a", ACL: open, Flags: wire.FlagPersistentWithTTL}, wire.ErrUnimplemented},
		{"container flag through create", wire.OpCreate, &wire.CreateRequest{Path: "/a", ACL: open, Flags: wire.FlagContainer}, wire.OK},
		{"delete of a path without a slash", wire.OpDelete, &wire.DeleteRequest{Path: "a", Version: -1}, wire.ErrBadArguments},
		{"delete of a system node", wire.OpDelete, &wire.DeleteRequest{Path: "/zookeeper", Version: -1}, wire.ErrBadArguments},
		// ZooKeeper never validates a delete's path further: no node has
		// it, which the tree says.
		{"delete of a path no node can have", wire.OpDelete, &wire.DeleteRequest{Path: "/a//b", Version: -1}, wire.OK},
		{"setData of a bad path", wire.OpSetData, &wire.SetDataRequest{Path: "/a/.", Version: -1}, wire.ErrBadArguments},
		{"setData of too much data", wire.OpSetData, &wire.SetDataRequest{Path: "/a", Data: big, Version: -1}, wire.ErrBadArguments},
		{"setACL of a bad path", wire.OpSetACL, &wire.SetACLRequest{Path: "", ACL: open, Version: -1}, wire.ErrBadArguments},
		{"check of a bad path", wire.OpCheck, &wire.CheckVersionRequest{Path: "/a\x00", Version: -1}, wire.ErrBadArguments},
	} {
		req := request(t, 5, c.op, c.body)
		plan := zk.PlanWrite(&req, zk.Session{ID: 1}, limits)
		if c.want != wire.OK && len(req.Data) <= limits.MaxData {
			if plan.Early != wire.OK || plan.Txn == nil || len(plan.Txn.Ops) != 1 || plan.Txn.Ops[0].Kind != tree.OpFail ||
				zk.CodeOf(plan.Txn.Ops[0].Fail.Err()) != c.want {
				t.Errorf("%s: early %v, txn %+v; want a failing op of %v", c.name, plan.Early, plan.Txn, c.want)
			}
			continue
		}
		if plan.Early != c.want || (plan.Txn != nil) != (c.want == wire.OK) {
			t.Errorf("%s: early %v, txn %v; want %v", c.name, plan.Early, plan.Txn != nil, c.want)
			continue
		}
		if c.want == wire.OK {
			continue
		}
		h, d := reply(t, plan.Answer(5, 42))
		if h != (wire.ReplyHeader{Xid: 5, Zxid: 42, Err: c.want}) || d.Remaining() != 0 {
			t.Errorf("%s: reply %+v with %d body bytes", c.name, h, d.Remaining())
		}
	}
}

// A transaction carries the session, its identities and the request as
// the tree takes it.
func TestPlanWriteTxn(t *testing.T) {
	s := zk.Session{ID: 9, Auth: []tree.Identity{annID}}
	req := request(t, 1, wire.OpSetData, &wire.SetDataRequest{Path: "/a", Version: 3})
	plan := zk.PlanWrite(&req, s, limits)
	// Null data stays null, as on ZooKeeper (a later getData says so).
	want := tree.Op{Kind: tree.OpSetData, Path: "/a", Data: nil, Version: 3}
	if txn := plan.Txn; txn == nil || txn.Kind != tree.TxnOps || txn.Session != 9 || txn.Multi ||
		!slices.Equal(txn.Auth, s.Auth) || len(txn.Ops) != 1 || !opEqual(txn.Ops[0], want) {
		t.Fatalf("setData txn = %+v", plan.Txn)
	}
	req = request(t, 1, wire.OpCreate, &wire.CreateRequest{Path: "/a", Data: []byte("x"), ACL: annOnly, Flags: wire.FlagEphemeral})
	plan = zk.PlanWrite(&req, s, limits)
	want = tree.Op{Kind: tree.OpCreate, Path: "/a", Data: []byte("x"), Mode: tree.ModeEphemeral,
		ACL: []tree.ACL{{Perms: tree.PermAll, Scheme: "digest", ID: annID.ID}}}
	if txn := plan.Txn; txn == nil || len(txn.Ops) != 1 || !opEqual(txn.Ops[0], want) {
		t.Fatalf("create txn = %+v", plan.Txn)
	}
}

func opEqual(a, b tree.Op) bool {
	return a.Kind == b.Kind && a.Path == b.Path && bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil) &&
		a.Mode == b.Mode && a.Version == b.Version && slices.Equal(a.ACL, b.ACL)
}

// Each write's reply, on success and with the errors the tree finds.
func TestWriteReplies(t *testing.T) {
	f := newFixture(t)
	s := f.session()

	var c1 wire.CreateResponse
	if err := c1.Decode(f.mustWrite(s, wire.OpCreate, &wire.CreateRequest{Path: "/w", Data: []byte("ab"), ACL: open})); err != nil || c1.Path != "/w" {
		t.Fatalf("create: %q %v", c1.Path, err)
	}
	created := f.zxid
	var c2 wire.Create2Response
	if err := c2.Decode(f.mustWrite(s, wire.OpCreate2, &wire.CreateRequest{Path: "/w/s-", ACL: open, Flags: wire.FlagEphemeralSequential})); err != nil {
		t.Fatal(err)
	}
	if c2.Path != "/w/s-0000000000" || c2.Stat.Czxid != f.zxid || c2.Stat.EphemeralOwner != s.ID || c2.Stat.Ctime != 2000 {
		t.Errorf("create2 = %+v", c2)
	}
	var cc wire.Create2Response
	if err := cc.Decode(f.mustWrite(s, wire.OpCreateContainer, &wire.CreateRequest{Path: "/box", ACL: open, Flags: wire.FlagContainer})); err != nil {
		t.Fatal(err)
	}
	if cc.Path != "/box" || cc.Stat.EphemeralOwner != 0 {
		t.Errorf("createContainer = %+v; a container shows owner 0", cc)
	}
	var sd wire.StatResponse
	if err := sd.Decode(f.mustWrite(s, wire.OpSetData, &wire.SetDataRequest{Path: "/w", Data: []byte("abc"), Version: 0})); err != nil {
		t.Fatal(err)
	}
	// One child created: cversion 1 (2*creates - children).
	if sd.Stat.Version != 1 || sd.Stat.Mzxid != f.zxid || sd.Stat.Czxid != created || sd.Stat.DataLength != 3 || sd.Stat.Cversion != 1 {
		t.Errorf("setData stat = %+v", sd.Stat)
	}
	var sa wire.StatResponse
	if err := sa.Decode(f.mustWrite(s, wire.OpSetACL, &wire.SetACLRequest{Path: "/w", ACL: open, Version: 0})); err != nil {
		t.Fatal(err)
	}
	if sa.Stat.Aversion != 1 || sa.Stat.Version != 1 {
		t.Errorf("setACL stat = %+v", sa.Stat)
	}
	if d := f.mustWrite(s, wire.OpCheck, &wire.CheckVersionRequest{Path: "/w", Version: 1}); d.Remaining() != 0 {
		t.Errorf("check answers %d body bytes", d.Remaining())
	}
	f.create(s, "/gone", nil)
	if d := f.mustWrite(s, wire.OpDelete, &wire.DeleteRequest{Path: "/gone", Version: -1}); d.Remaining() != 0 {
		t.Errorf("delete answers %d body bytes", d.Remaining())
	}

	for _, c := range []struct {
		name string
		op   int32
		body encodable
		want wire.Code
	}{
		{"create of an existing node", wire.OpCreate, &wire.CreateRequest{Path: "/w", ACL: open}, wire.ErrNodeExists},
		{"create of /", wire.OpCreate, &wire.CreateRequest{Path: "/", ACL: open}, wire.ErrNodeExists},
		{"create under a missing parent", wire.OpCreate, &wire.CreateRequest{Path: "/none/x", ACL: open}, wire.ErrNoNode},
		{"create under an ephemeral", wire.OpCreate, &wire.CreateRequest{Path: "/w/s-0000000000/x", ACL: open}, wire.ErrNoChildrenForEphemerals},
		{"create with an empty ACL", wire.OpCreate, &wire.CreateRequest{Path: "/noacl", ACL: []wire.ACL{}}, wire.ErrInvalidACL},
		{"create with an ACL of the auth scheme and no identity", wire.OpCreate,
			&wire.CreateRequest{Path: "/auth", ACL: []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth"}}}}, wire.ErrInvalidACL},
		{"setData of the wrong version", wire.OpSetData, &wire.SetDataRequest{Path: "/w", Version: 7}, wire.ErrBadVersion},
		{"setData of a missing node", wire.OpSetData, &wire.SetDataRequest{Path: "/none", Version: -1}, wire.ErrNoNode},
		{"setData without WRITE", wire.OpSetData, &wire.SetDataRequest{Path: "/zookeeper/config", Version: -1}, wire.ErrNoAuth},
		{"delete of a node with children", wire.OpDelete, &wire.DeleteRequest{Path: "/w", Version: -1}, wire.ErrNotEmpty},
		{"delete of a path no node can have", wire.OpDelete, &wire.DeleteRequest{Path: "/w//b", Version: -1}, wire.ErrNoNode},
		{"delete under a missing parent", wire.OpDelete, &wire.DeleteRequest{Path: "/none/", Version: -1}, wire.ErrNoNode},
		{"create of a bad path under a missing parent", wire.OpCreate, &wire.CreateRequest{Path: "/none/..", ACL: open}, wire.ErrNoNode},
		{"create of a bad path with an invalid ACL", wire.OpCreate, &wire.CreateRequest{Path: "/w/.", ACL: []wire.ACL{}}, wire.ErrInvalidACL},
		{"create of a bad path under an existing parent", wire.OpCreate, &wire.CreateRequest{Path: "/w/.", ACL: open}, wire.ErrBadArguments},
		{"create ending in / under an existing parent", wire.OpCreate, &wire.CreateRequest{Path: "/w/", ACL: open}, wire.ErrBadArguments},
		{"check of a missing node", wire.OpCheck, &wire.CheckVersionRequest{Path: "/none", Version: -1}, wire.ErrNoNode},
	} {
		before := f.zxid
		h, d := f.write(s, c.op, c.body)
		if h.Err != c.want || d.Remaining() != 0 {
			t.Errorf("%s: %v (%d body bytes), want %v", c.name, h.Err, d.Remaining(), c.want)
		}
		if h.Zxid != before+1 {
			t.Errorf("%s: reply zxid %d, want the transaction's %d", c.name, h.Zxid, before+1)
		}
	}
}

// A multi answers OK in its header with each op's result in the body; one
// that fails changes nothing.
func TestMulti(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	f.create(s, "/m", nil)
	ops := []wire.MultiOp{
		{Type: wire.OpCreate2, Path: "/m/a", ACL: open},
		{Type: wire.OpSetData, Path: "/m/a", Data: []byte("x"), Version: 0},
		{Type: wire.OpCheck, Path: "/m", Version: 0},
		{Type: wire.OpDelete, Path: "/m/a", Version: 1},
	}
	var mr wire.MultiResponse
	if err := mr.Decode(f.mustWrite(s, wire.OpMulti, &wire.MultiRequest{Ops: ops})); err != nil {
		t.Fatal(err)
	}
	// create2 inside a multi is answered as a plain create.
	wantTypes := []int32{wire.OpCreate, wire.OpSetData, wire.OpCheck, wire.OpDelete}
	if len(mr.Results) != len(wantTypes) {
		t.Fatalf("multi results %+v", mr.Results)
	}
	for i, r := range mr.Results {
		if r.Type != wantTypes[i] {
			t.Errorf("result %d type %d, want %d", i, r.Type, wantTypes[i])
		}
	}
	if mr.Results[0].Path != "/m/a" || mr.Results[1].Stat.Version != 1 {
		t.Errorf("multi results %+v", mr.Results)
	}

	// The failing op carries its code, the ops before it OK, those after
	// it RuntimeInconsistency; nothing was applied.
	fail := []wire.MultiOp{
		{Type: wire.OpCreate, Path: "/m/b", ACL: open},
		{Type: wire.OpCheck, Path: "/m", Version: 99},
		{Type: wire.OpDelete, Path: "/m", Version: -1},
	}
	h, d := f.write(s, wire.OpMulti, &wire.MultiRequest{Ops: fail})
	if h.Err != wire.OK {
		t.Fatalf("failed multi header %v, want OK", h.Err)
	}
	mr = wire.MultiResponse{}
	if err := mr.Decode(d); err != nil {
		t.Fatal(err)
	}
	wantErrs := []wire.Code{wire.OK, wire.ErrBadVersion, wire.ErrRuntimeInconsistency}
	for i, r := range mr.Results {
		if r.Type != wire.OpError || r.Err != wantErrs[i] {
			t.Errorf("failed multi result %d = %+v, want error %v", i, r, wantErrs[i])
		}
	}
	if _, err := f.tree.Exists("/m/b"); err == nil {
		t.Error("the failed multi's create was applied")
	}

	// Refused on its own terms (a read inside a write multi, a TTL
	// create) or for its path: the refused op carries the refusal, the
	// ops before it OK and those after it RUNTIMEINCONSISTENCY, unless an
	// op before it fails first, since ZooKeeper takes a multi's ops in
	// order.
	for _, c := range []struct {
		ops  []wire.MultiOp
		want []wire.Code
	}{
		{[]wire.MultiOp{{Type: wire.OpCheck, Path: "/m", Version: -1}, {Type: wire.OpDelete, Path: "m", Version: -1}},
			[]wire.Code{wire.OK, wire.ErrBadArguments}},
		{[]wire.MultiOp{{Type: wire.OpCheck, Path: "/m", Version: -1}, {Type: wire.OpCreateTTL, Path: "/m/t", ACL: open, Flags: wire.FlagPersistentWithTTL, TTL: 5}},
			[]wire.Code{wire.OK, wire.ErrUnimplemented}},
		{[]wire.MultiOp{{Type: wire.OpCheck, Path: "/m", Version: 7}, {Type: wire.OpCreate, Path: "/m/u", ACL: open, Flags: 7}},
			[]wire.Code{wire.ErrBadVersion, wire.ErrRuntimeInconsistency}},
		{[]wire.MultiOp{{Type: wire.OpCheck, Path: "/m", Version: -1}, {Type: wire.OpCreate, Path: "/m/u", ACL: open, Flags: 7}, {Type: wire.OpCheck, Path: "/m", Version: -1}},
			[]wire.Code{wire.OK, wire.ErrBadArguments, wire.ErrRuntimeInconsistency}},
		{[]wire.MultiOp{{Type: wire.OpDelete, Path: "/none", Version: -1}, {Type: wire.OpSetData, Path: "/m/", Version: -1}},
			[]wire.Code{wire.ErrNoNode, wire.ErrRuntimeInconsistency}},
		{[]wire.MultiOp{{Type: wire.OpCreate, Path: "/m/d", ACL: open}, {Type: wire.OpSetData, Path: "/m/d/", Version: -1}, {Type: wire.OpCheck, Path: "/m", Version: -1}},
			[]wire.Code{wire.OK, wire.ErrBadArguments, wire.ErrRuntimeInconsistency}},
	} {
		h, d := f.write(s, wire.OpMulti, &wire.MultiRequest{Ops: c.ops})
		mr = wire.MultiResponse{}
		if err := mr.Decode(d); err != nil || h.Err != wire.OK || len(mr.Results) != len(c.want) {
			t.Fatalf("multi %+v: %+v %+v %v", c.ops, h, mr, err)
		}
		for i, r := range mr.Results {
			if r.Type != wire.OpError || r.Err != c.want[i] {
				t.Errorf("multi %+v: result %d %+v, want error %v", c.ops, i, r, c.want[i])
			}
		}
	}
	for _, p := range []string{"/m/c", "/m/d", "/m/t"} {
		if _, err := f.tree.Exists(p); err == nil {
			t.Errorf("a failed multi created %s", p)
		}
	}

	// A plain create with a TTL mode fails the whole multi as one
	// ZooKeeper 3.8 cannot process, once the ops before it pass.
	// So does a read inside a write multi, wherever it is and whatever
	// the ops before it would do.
	ttl := wire.MultiOp{Type: wire.OpCreate, Path: "/m/t", ACL: open, Flags: wire.FlagPersistentWithTTL}
	read := wire.MultiOp{Type: wire.OpGetData, Path: "/m"}
	for _, ops := range [][]wire.MultiOp{{ttl}, {{Type: wire.OpCheck, Path: "/m", Version: -1}, ttl},
		{{Type: wire.OpCreate, Path: "/m/c", ACL: open}, read}, {{Type: wire.OpCheck, Path: "/m", Version: 7}, read}, {read}} {
		if h, d := f.write(s, wire.OpMulti, &wire.MultiRequest{Ops: ops}); h.Err != wire.ErrMarshallingError || d.Remaining() != 0 {
			t.Errorf("multi %+v: %v with %d body bytes, want a bare MARSHALLINGERROR", ops, h.Err, d.Remaining())
		}
	}
	h, d = f.write(s, wire.OpMulti, &wire.MultiRequest{Ops: []wire.MultiOp{{Type: wire.OpCheck, Path: "/m", Version: 9}, ttl}})
	mr = wire.MultiResponse{}
	if err := mr.Decode(d); err != nil || h.Err != wire.OK || len(mr.Results) != 2 || mr.Results[0].Err != wire.ErrBadVersion {
		t.Errorf("multi failing before its TTL create: %+v %+v %v", h, mr, err)
	}

	// Refused at its first op on its own terms: answered at once.
	req := request(t, 3, wire.OpMulti, &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpCreate, Path: "/m/u", ACL: open, Flags: 7}, {Type: wire.OpCheck, Path: "/m", Version: -1}, {Type: wire.OpCheck, Path: "/m", Version: -1},
	}})
	plan := zk.PlanWrite(&req, s, limits)
	mr = wire.MultiResponse{}
	if _, d := reply(t, plan.Answer(3, f.zxid)); plan.Txn != nil || mr.Decode(d) != nil || len(mr.Results) != 3 ||
		mr.Results[0].Err != wire.ErrBadArguments || mr.Results[1].Err != wire.ErrRuntimeInconsistency || mr.Results[2].Err != wire.ErrRuntimeInconsistency {
		t.Errorf("multi refused at its first op: txn %v, %+v", plan.Txn != nil, mr.Results)
	}

	// An empty multi changes nothing and answers an empty result list.
	req = request(t, 4, wire.OpMulti, &wire.MultiRequest{})
	plan = zk.PlanWrite(&req, s, limits)
	if plan.Txn != nil || plan.Early != wire.OK {
		t.Fatalf("empty multi planned: %+v", plan)
	}
	h, d = reply(t, plan.Answer(4, 17))
	mr = wire.MultiResponse{}
	if err := mr.Decode(d); err != nil || h != (wire.ReplyHeader{Xid: 4, Zxid: 17}) || len(mr.Results) != 0 {
		t.Errorf("empty multi: %+v %+v %v", h, mr, err)
	}
}

// The outcome a leader sends a forwarding member decodes to what it
// encoded, and the reply built from it is the leader's own.
func TestOutcomeCodec(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	f.create(s, "/o", nil)
	req := request(t, 8, wire.OpMulti, &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpCreate, Path: "/o/x", ACL: open},
		{Type: wire.OpSetData, Path: "/o", Data: []byte("d"), Version: -1},
	}})
	plan := zk.PlanWrite(&req, s, limits)
	f.zxid++
	res := f.tree.Apply(plan.Txn, f.zxid)
	o := zk.OutcomeOf(&res)
	e := wire.NewEncoder(nil)
	o.Encode(e)
	var back zk.Outcome
	if err := back.Decode(wire.NewDecoder(e.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plan.Reply(8, f.zxid, &o), plan.Reply(8, f.zxid, &back)) {
		t.Errorf("reply from the decoded outcome differs: %+v vs %+v", back, o)
	}
	if err := back.Decode(wire.NewDecoder([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0})); err == nil {
		t.Error("an outcome claiming more ops than its bytes hold decoded")
	}
}

// CodeOf maps every tree error, wrapped or not, and anything else to
// SystemError.
func TestCodeOf(t *testing.T) {
	for err, want := range map[error]wire.Code{
		nil:                             wire.OK,
		tree.ErrNoNode:                  wire.ErrNoNode,
		tree.ErrNodeExists:              wire.ErrNodeExists,
		tree.ErrBadVersion:              wire.ErrBadVersion,
		tree.ErrNotEmpty:                wire.ErrNotEmpty,
		tree.ErrNoChildrenForEphemerals: wire.ErrNoChildrenForEphemerals,
		tree.ErrNoAuth:                  wire.ErrNoAuth,
		tree.ErrInvalidACL:              wire.ErrInvalidACL,
		tree.ValidatePath("x", false):   wire.ErrBadArguments,
		tree.ErrSessionExpired:          wire.ErrSessionExpired,
		tree.ErrRuntimeInconsistency:    wire.ErrRuntimeInconsistency,
		tree.ErrUnimplemented:           wire.ErrUnimplemented,
		wire.ErrNoWatcher:               wire.ErrNoWatcher,
		bytes.ErrTooLarge:               wire.ErrSystemError,
	} {
		if got := zk.CodeOf(err); got != want {
			t.Errorf("CodeOf(%v) = %v, want %v", err, got, want)
		}
	}
}

// ACLs with x509 identities: the auth scheme expands to the session's
// authenticated identities (x509 and digest, not ip), and only a holder
// may write or read.
func TestX509ACL(t *testing.T) {
	f := newFixture(t)
	ops := f.session(opsID)
	plain := f.session()
	f.create(ops, "/x", []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth"}}})
	_, d, _ := f.read(ops, wire.OpGetACL, &wire.PathRequest{Path: "/x"})
	var ga wire.GetACLResponse
	if err := ga.Decode(d); err != nil || !slices.Equal(ga.ACL, opsOnly) {
		t.Errorf("ACL of auth created by an x509 session = %+v %v, want %+v", ga.ACL, err, opsOnly)
	}
	if h, _ := f.write(plain, wire.OpSetData, &wire.SetDataRequest{Path: "/x", Version: -1}); h.Err != wire.ErrNoAuth {
		t.Errorf("setData without the identity: %v", h.Err)
	}
	if h, _ := f.write(ops, wire.OpSetData, &wire.SetDataRequest{Path: "/x", Version: -1}); h.Err != wire.OK {
		t.Errorf("setData with the identity: %v", h.Err)
	}
	if h, _, _ := f.read(plain, wire.OpGetData, &wire.PathWatchRequest{Path: "/x"}); h.Err != wire.ErrNoAuth {
		t.Errorf("getData without the identity: %v", h.Err)
	}
	if h, _ := f.write(plain, wire.OpCreate, &wire.CreateRequest{Path: "/x/c", ACL: open}); h.Err != wire.ErrNoAuth {
		t.Errorf("create under it without the identity: %v", h.Err)
	}
}

// Inside a multi, a container (whatever create opcode asked for it) is
// answered with a create2 result, path and stat, and a plain create2 with
// a create result, path only, as ZooKeeper 3.8 answers.
func TestMultiCreateResultTypes(t *testing.T) {
	s := zk.Session{ID: 9}
	req := request(t, 1, wire.OpMulti, &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpCreateContainer, Path: "/a", ACL: open, Flags: wire.FlagContainer},
		{Type: wire.OpCreate, Path: "/b", ACL: open, Flags: wire.FlagContainer},
		{Type: wire.OpCreate2, Path: "/c", ACL: open, Flags: wire.FlagContainer},
		{Type: wire.OpCreate2, Path: "/d", ACL: open},
		{Type: wire.OpCreate, Path: "/e", ACL: open},
	}})
	plan := zk.PlanWrite(&req, s, limits)
	if plan.Txn == nil {
		t.Fatalf("multi planned as early %v", plan.Early)
	}
	st := wire.Stat{Czxid: 7, Version: 0}
	out := zk.Outcome{Ops: []zk.OpOutcome{{Path: "/a", Stat: st}, {Path: "/b", Stat: st}, {Path: "/c", Stat: st}, {Path: "/d", Stat: st}, {Path: "/e", Stat: st}}}
	_, d := reply(t, plan.Reply(1, 7, &out))
	var mr wire.MultiResponse
	if err := mr.Decode(d); err != nil {
		t.Fatal(err)
	}
	want := []int32{wire.OpCreate2, wire.OpCreate2, wire.OpCreate2, wire.OpCreate, wire.OpCreate}
	for i, r := range mr.Results {
		if r.Type != want[i] || (r.Type == wire.OpCreate2) != (r.Stat.Czxid == 7) {
			t.Errorf("result %d: type %d stat %+v, want type %d", i, r.Type, r.Stat, want[i])
		}
	}
}
