package tree

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNew(t *testing.T) {
	tr := New()
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	kids, st, err := tr.Children("/", nil)
	if err != nil || !slices.Equal(kids, []string{"zookeeper"}) || st.NumChildren != 1 || st.Cversion != 0 {
		t.Fatalf("root: %v %+v %v", kids, st, err)
	}
	kids, _, _ = tr.Children("/zookeeper", nil)
	if !slices.Equal(kids, []string{"config", "quota"}) {
		t.Fatalf("/zookeeper children %v", kids)
	}
	acl, st, err := tr.GetACL("/zookeeper/config", nil)
	if err != nil || !slices.Equal(acl, []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}}) {
		t.Fatalf("config ACL %v %v", acl, err)
	}
	if (st != Stat{Aversion: -1}) {
		t.Fatalf("config stat %+v", st)
	}
	if st, _ := tr.Exists("/zookeeper/quota"); st != (Stat{}) {
		t.Fatalf("quota stat %+v", st)
	}
	if tr.NodeCount() != 4 || tr.EphemeralCount() != 0 {
		t.Fatalf("counts %d %d", tr.NodeCount(), tr.EphemeralCount())
	}
	want := int64(len("/") + len("/zookeeper") + len("/zookeeper/quota") + len("/zookeeper/config"))
	if tr.ApproximateDataSize() != want {
		t.Fatalf("data size %d want %d", tr.ApproximateDataSize(), want)
	}
}

// TestOpErrors covers the error of every op kind in ZooKeeper's order of
// precedence. Setup ops run as super+alice; the op under test runs with
// auth (and as a live session when session is set).
func TestOpErrors(t *testing.T) {
	readOnly := []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}}
	allButCreate := []ACL{{Perms: PermAll &^ PermCreate, Scheme: "world", ID: "anyone"}}
	allButDelete := []ACL{{Perms: PermAll &^ PermDelete, Scheme: "world", ID: "anyone"}}
	allButWrite := []ACL{{Perms: PermAll &^ PermWrite, Scheme: "world", ID: "anyone"}}
	allButAdmin := []ACL{{Perms: PermAll &^ PermAdmin, Scheme: "world", ID: "anyone"}}
	allButRead := []ACL{{Perms: PermAll &^ PermRead, Scheme: "world", ID: "anyone"}}
	setupAuth := []Identity{superID, alice}

	cases := []struct {
		name    string
		setup   []Op
		auth    []Identity
		session bool
		op      Op
		want    error
	}{
		// create
		{name: "create ok", op: createOp("/a", "x", ModePersistent)},
		{name: "create no parent", op: createOp("/a/b", "", ModePersistent), want: ErrNoNode},
		{name: "create exists", setup: []Op{createOp("/a", "", 0)}, op: createOp("/a", "", 0), want: ErrNodeExists},
		{name: "create root", op: createOp("/", "", 0), want: ErrNodeExists},
		{name: "create under ephemeral", setup: []Op{createOp("/e", "", ModeEphemeral)}, session: true,
			op: createOp("/e/c", "", 0), want: ErrNoChildrenForEphemerals},
		{name: "create under container", setup: []Op{createOp("/c", "", ModeContainer)}, op: createOp("/c/x", "", 0)},
		{name: "create no CREATE on parent", setup: []Op{createACL("/p", allButCreate)}, op: createOp("/p/c", "", 0), want: ErrNoAuth},
		{name: "create CREATE is enough", setup: []Op{createACL("/p", []ACL{{Perms: PermCreate, Scheme: "world", ID: "anyone"}})},
			op: createOp("/p/c", "", 0)},
		{name: "create digest denied", setup: []Op{createACL("/p", aliceOnly)}, auth: []Identity{bob}, op: createOp("/p/c", "", 0), want: ErrNoAuth},
		{name: "create digest allowed", setup: []Op{createACL("/p", aliceOnly)}, auth: []Identity{alice}, op: createOp("/p/c", "", 0)},
		{name: "create super bypasses", setup: []Op{createACL("/p", aliceOnly)}, auth: superAuth, op: createOp("/p/c", "", 0)},
		{name: "create empty ACL", op: createACL("/a", nil), want: ErrInvalidACL},
		{name: "create bad scheme", op: createACL("/a", []ACL{{Perms: PermAll, Scheme: "sasl", ID: "x"}}), want: ErrInvalidACL},
		{name: "create auth without digest", auth: []Identity{localhost},
			op: createACL("/a", []ACL{{Perms: PermAll, Scheme: "auth"}}), want: ErrInvalidACL},
		{name: "create auth with digest", auth: aliceAuth, op: createACL("/a", []ACL{{Perms: PermAll, Scheme: "auth"}})},
		{name: "create invalid ACL beats missing parent", op: createACL("/x/y", nil), want: ErrInvalidACL},
		{name: "create missing parent beats permission", op: createOp("/x/y", "", 0), auth: noAuth, want: ErrNoNode},
		{name: "create permission beats exists", setup: []Op{createACL("/p", readOnly), createOp("/p/c", "", 0)},
			op: createOp("/p/c", "", 0), want: ErrNoAuth},
		// ZooKeeper validates the whole path only after the parent (what
		// precedes the last slash) and the CREATE permission on it.
		{name: "create bad path", setup: []Op{createOp("/a", "", 0)}, op: createOp("/a/", "", 0), want: ErrBadArguments},
		{name: "create relative path", setup: []Op{createOp("/a", "", 0)}, op: createOp("/a/..", "", 0), want: ErrBadArguments},
		{name: "create bad path, parent missing", op: createOp("/a/..", "", 0), want: ErrNoNode},
		{name: "create relative path, parent missing", op: createOp("a/b", "", 0), want: ErrNoNode},
		{name: "create bad path, no CREATE on parent", setup: []Op{createACL("/p", allButCreate)}, op: createOp("/p/", "", 0), want: ErrNoAuth},
		{name: "create bad path, invalid ACL", setup: []Op{createOp("/a", "", 0)}, op: Op{Kind: OpCreate, Path: "/a/."}, want: ErrInvalidACL},
		{name: "create without a slash", op: createOp("a", "", 0), want: ErrBadArguments},
		{name: "create with a NUL", op: createOp("/a\x00", "", 0), want: ErrBadArguments},
		{name: "create TTL", op: createOp("/a", "", 5), want: ErrUnimplemented},
		{name: "create TTL sequential", op: createOp("/a", "", 6), want: ErrUnimplemented},
		{name: "create unknown mode", op: createOp("/a", "", 7), want: ErrBadArguments},
		{name: "create ephemeral without session", op: createOp("/a", "", ModeEphemeral), want: ErrSessionExpired},
		{name: "create ephemeral with session", session: true, op: createOp("/a", "", ModeEphemeralSequential)},
		{name: "create under /zookeeper", op: createOp("/zookeeper/x", "", 0)},

		// delete
		{name: "delete ok", setup: []Op{createOp("/a", "", 0)}, op: deleteOp("/a", -1)},
		{name: "delete version ok", setup: []Op{createOp("/a", "", 0), setDataOp("/a", "1", -1)}, op: deleteOp("/a", 1)},
		{name: "delete no node", op: deleteOp("/a", -1), want: ErrNoNode},
		{name: "delete no parent", op: deleteOp("/a/b", -1), want: ErrNoNode},
		{name: "delete bad version", setup: []Op{createOp("/a", "", 0)}, op: deleteOp("/a", 3), want: ErrBadVersion},
		{name: "delete not empty", setup: []Op{createOp("/a", "", 0), createOp("/a/b", "", 0)}, op: deleteOp("/a", -1), want: ErrNotEmpty},
		{name: "delete version beats not empty", setup: []Op{createOp("/a", "", 0), createOp("/a/b", "", 0)}, op: deleteOp("/a", 5), want: ErrBadVersion},
		{name: "delete needs DELETE on parent", setup: []Op{createACL("/p", allButDelete), createOp("/p/c", "", 0)},
			op: deleteOp("/p/c", -1), want: ErrNoAuth},
		{name: "delete ignores node's own ACL", setup: []Op{createACL("/p", readOnly)}, op: deleteOp("/p", -1)},
		{name: "delete permission beats missing node", setup: []Op{createACL("/p", allButDelete)}, op: deleteOp("/p/c", -1), want: ErrNoAuth},
		{name: "delete root", op: deleteOp("/", -1), want: ErrBadArguments},
		{name: "delete /zookeeper", op: deleteOp("/zookeeper", -1), want: ErrBadArguments},
		{name: "delete /zookeeper/quota", op: deleteOp("/zookeeper/quota", -1), want: ErrBadArguments},
		{name: "delete /zookeeper/config", op: deleteOp("/zookeeper/config", -1), want: ErrBadArguments},
		{name: "delete bad path", op: deleteOp("a", -1), want: ErrBadArguments},
		{name: "delete with a NUL", op: deleteOp("/a\x00", -1), want: ErrBadArguments},
		// A delete's path is never validated as a whole, as in ZooKeeper.
		{name: "delete trailing slash", setup: []Op{createOp("/a", "", 0)}, op: deleteOp("/a/", -1), want: ErrNoNode},
		{name: "delete trailing slash, no DELETE on parent", setup: []Op{createACL("/p", allButDelete)}, op: deleteOp("/p/", -1), want: ErrNoAuth},
		{name: "delete relative path", op: deleteOp("a/b", -1), want: ErrNoNode},

		// setData
		{name: "setData ok", setup: []Op{createOp("/a", "", 0)}, op: setDataOp("/a", "x", 0)},
		{name: "setData no node", op: setDataOp("/a", "x", -1), want: ErrNoNode},
		{name: "setData bad version", setup: []Op{createOp("/a", "", 0)}, op: setDataOp("/a", "x", 1), want: ErrBadVersion},
		{name: "setData no WRITE", setup: []Op{createACL("/a", allButWrite)}, op: setDataOp("/a", "x", -1), want: ErrNoAuth},
		{name: "setData permission beats version", setup: []Op{createACL("/a", allButWrite)}, op: setDataOp("/a", "x", 7), want: ErrNoAuth},
		{name: "setData config denied", op: setDataOp("/zookeeper/config", "x", -1), want: ErrNoAuth},
		{name: "setData config super", auth: superAuth, op: setDataOp("/zookeeper/config", "x", -1)},

		// setACL
		{name: "setACL ok", setup: []Op{createOp("/a", "", 0)}, op: setACLOp("/a", readOnly, 0)},
		{name: "setACL no node", op: setACLOp("/a", OpenACL, -1), want: ErrNoNode},
		{name: "setACL invalid beats no node", op: setACLOp("/a", nil, -1), want: ErrInvalidACL},
		{name: "setACL bad aversion", setup: []Op{createOp("/a", "", 0), setDataOp("/a", "x", -1)}, op: setACLOp("/a", OpenACL, 1), want: ErrBadVersion},
		{name: "setACL no ADMIN", setup: []Op{createACL("/a", allButAdmin)}, op: setACLOp("/a", OpenACL, -1), want: ErrNoAuth},
		{name: "setACL auth expands", setup: []Op{createOp("/a", "", 0)}, auth: aliceAuth,
			op: setACLOp("/a", []ACL{{Perms: PermAll, Scheme: "auth"}}, -1)},

		// check
		{name: "check ok", setup: []Op{createOp("/a", "", 0)}, op: checkOp("/a", 0)},
		{name: "check any", setup: []Op{createOp("/a", "", 0)}, op: checkOp("/a", -1)},
		{name: "check no node", op: checkOp("/a", -1), want: ErrNoNode},
		{name: "check bad version", setup: []Op{createOp("/a", "", 0)}, op: checkOp("/a", 1), want: ErrBadVersion},
		{name: "check no READ", setup: []Op{createACL("/a", allButRead)}, op: checkOp("/a", 0), want: ErrNoAuth},

		{name: "unknown op", op: Op{Kind: 99, Path: "/a"}, want: ErrBadArguments},
		{name: "refused op", op: Op{Kind: OpFail, Path: "/a", Fail: FailUnimplemented}, want: ErrUnimplemented},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			sess := h.session()
			for _, op := range c.setup {
				h.must(sess, setupAuth, op)
			}
			var reqSess int64
			if c.session {
				reqSess = sess
			}
			before := clone(t, h.tree)
			res := h.do(reqSess, c.auth, c.op)
			wantErr(t, "Result.Err", res.Err, c.want)
			if len(res.Ops) != 1 {
				t.Fatalf("%d op results", len(res.Ops))
			}
			wantErr(t, "OpResult.Err", res.Ops[0].Err, c.want)
			if c.want != nil {
				if !h.tree.Equal(before) {
					t.Fatal("failed op changed the tree")
				}
				if len(res.Events) != 0 {
					t.Fatalf("failed op produced events %v", res.Events)
				}
			}
		})
	}
}

func TestCreateStats(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.must(0, nil, createOp("/p", "parent", 0))
	pBefore := h.stat("/p")

	h.zxid = 99
	res := h.apply(&Txn{Kind: TxnOps, Time: 12345, Ops: []Op{createOp("/p/c", "hello", 0)}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := Stat{Czxid: 100, Mzxid: 100, Ctime: 12345, Mtime: 12345, DataLength: 5, Pzxid: 100}
	if got := res.Ops[0].Stat; got != want {
		t.Fatalf("result stat %+v want %+v", got, want)
	}
	if got := h.stat("/p/c"); got != want {
		t.Fatalf("stat %+v want %+v", got, want)
	}
	if res.Ops[0].Path != "/p/c" {
		t.Fatalf("path %q", res.Ops[0].Path)
	}
	p := h.stat("/p")
	wantP := pBefore
	wantP.Cversion, wantP.Pzxid, wantP.NumChildren = 1, 100, 1
	if p != wantP {
		t.Fatalf("parent %+v want %+v", p, wantP)
	}
	if !eventsEqual(res.Events, []Event{{Type: EventCreated, Path: "/p/c"}, {Type: EventChildrenChanged, Path: "/p"}}) {
		t.Fatalf("events %v", res.Events)
	}

	res = h.do(0, nil, createOp("/top", "", 0))
	if !eventsEqual(res.Events, []Event{{Type: EventCreated, Path: "/top"}, {Type: EventChildrenChanged, Path: "/"}}) {
		t.Fatalf("events %v", res.Events)
	}

	r := h.must(sess, nil, createOp("/p/e", "", ModeEphemeral))
	if r.Stat.EphemeralOwner != sess {
		t.Fatalf("ephemeral owner %d want %d", r.Stat.EphemeralOwner, sess)
	}
	r = h.must(sess, nil, createOp("/cont", "", ModeContainer))
	if r.Stat.EphemeralOwner != math.MinInt64 {
		t.Fatalf("container owner %#x", r.Stat.EphemeralOwner)
	}
	if h.tree.EphemeralCount() != 1 {
		t.Fatalf("ephemeral count %d", h.tree.EphemeralCount())
	}

	// Nil and empty data are kept apart, as ZooKeeper keeps null and empty.
	h.must(0, nil, Op{Kind: OpCreate, Path: "/nil", ACL: OpenACL})
	h.must(0, nil, Op{Kind: OpCreate, Path: "/empty", ACL: OpenACL, Data: []byte{}})
	if d, _, _ := h.tree.Get("/nil", nil); d != nil {
		t.Fatalf("nil data became %q", d)
	}
	if d, _, _ := h.tree.Get("/empty", nil); d == nil || len(d) != 0 {
		t.Fatalf("empty data became %v", d)
	}
}

func TestCreateCopiesInput(t *testing.T) {
	h := newHarness(t)
	data := []byte("abc")
	h.must(0, nil, Op{Kind: OpCreate, Path: "/a", Data: data, ACL: OpenACL})
	data[0] = 'X'
	if d, _, _ := h.tree.Get("/a", nil); string(d) != "abc" {
		t.Fatalf("stored data aliases the op: %q", d)
	}
}

func TestSequential(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/q", "", 0))
	steps := []struct {
		op   Op
		want string
	}{
		{createOp("/q/n-", "", ModePersistentSequential), "/q/n-0000000000"},
		{createOp("/q/n-", "", ModePersistentSequential), "/q/n-0000000001"},
		{createOp("/q/plain", "", ModePersistent), ""},
		{createOp("/q/x", "", ModePersistentSequential), "/q/x0000000003"},
		// Trailing "/" is allowed for sequential creates.
		{createOp("/q/", "", ModePersistentSequential), "/q/0000000004"},
		// A sequential create on "/" makes a child of the root.
		{createOp("/", "", ModePersistentSequential), "/0000000001"},
	}
	for _, s := range steps {
		r := h.must(0, nil, s.op)
		if s.want != "" && r.Path != s.want {
			t.Fatalf("created %q want %q", r.Path, s.want)
		}
	}
	// Deleting a child leaves cversion alone (ZooKeeper 3.8 DataTree), so
	// sequence numbers keep growing and are never reused.
	before := h.stat("/q")
	res := h.do(0, nil, deleteOp("/q/n-0000000001", -1))
	after := h.stat("/q")
	if after.Cversion != before.Cversion || after.Pzxid != h.zxid || after.NumChildren != before.NumChildren-1 {
		t.Fatalf("after delete %+v (before %+v)", after, before)
	}
	if !eventsEqual(res.Events, []Event{{Type: EventDeleted, Path: "/q/n-0000000001"}, {Type: EventChildrenChanged, Path: "/q"}}) {
		t.Fatalf("events %v", res.Events)
	}
	if r := h.must(0, nil, createOp("/q/n-", "", ModePersistentSequential)); r.Path != "/q/n-0000000005" {
		t.Fatalf("after delete created %q", r.Path)
	}
	// A collision with an explicitly created name fails as NodeExists.
	h.must(0, nil, createOp("/q/n-0000000007", "", 0))
	res = h.do(0, nil, createOp("/q/n-", "", ModePersistentSequential))
	wantErr(t, "collision", res.Err, ErrNodeExists)

	sess := h.session()
	r := h.must(sess, nil, createOp("/q/lock-", "", ModeEphemeralSequential))
	if r.Path != "/q/lock-0000000007" || r.Stat.EphemeralOwner != sess {
		t.Fatalf("ephemeral sequential %+v", r)
	}
}

func TestDelete(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.must(0, nil, createOp("/p", "", 0))
	h.must(sess, nil, createOp("/p/e", "", ModeEphemeral))
	if got := h.tree.Ephemerals(sess, ""); !slices.Equal(got, []string{"/p/e"}) {
		t.Fatalf("ephemerals %v", got)
	}
	size := h.tree.ApproximateDataSize()
	h.must(sess, nil, deleteOp("/p/e", 0))
	if got := h.tree.Ephemerals(sess, ""); len(got) != 0 {
		t.Fatalf("ephemerals after delete %v", got)
	}
	if h.tree.EphemeralCount() != 0 || h.tree.ApproximateDataSize() != size-int64(len("/p/e")) {
		t.Fatal("counters not updated")
	}
	st := h.stat("/p")
	if st.NumChildren != 0 || st.Cversion != 1 || st.Pzxid != h.zxid {
		t.Fatalf("parent %+v", st)
	}
	// Another session may delete someone's ephemeral.
	other := h.session()
	h.must(sess, nil, createOp("/p/e2", "", ModeEphemeral))
	h.must(other, nil, deleteOp("/p/e2", -1))
}

func TestSetData(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/a", "one", 0))
	created := h.stat("/a")
	h.zxid = 49
	res := h.apply(&Txn{Kind: TxnOps, Time: 777, Ops: []Op{setDataOp("/a", "three", 0)}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := created
	want.Version, want.Mzxid, want.Mtime, want.DataLength = 1, 50, 777, 5
	if res.Ops[0].Stat != want || h.stat("/a") != want {
		t.Fatalf("stat %+v / %+v want %+v", res.Ops[0].Stat, h.stat("/a"), want)
	}
	if !eventsEqual(res.Events, []Event{{Type: EventDataChanged, Path: "/a"}}) {
		t.Fatalf("events %v", res.Events)
	}
	if d, _, _ := h.tree.Get("/a", nil); string(d) != "three" {
		t.Fatalf("data %q", d)
	}
	h.must(0, nil, setDataOp("/a", "", 1))
	if h.stat("/a").Version != 2 || h.stat("/a").DataLength != 0 {
		t.Fatalf("stat %+v", h.stat("/a"))
	}
}

func TestSetACL(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/a", "", 0))
	before := h.stat("/a")
	res := h.do(0, aliceAuth, setACLOp("/a", []ACL{{Perms: PermRead | PermAdmin, Scheme: "auth"}, {Perms: PermRead, Scheme: "world", ID: "anyone"}}, 0))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Events) != 0 {
		t.Fatalf("setACL produced events %v", res.Events)
	}
	want := before
	want.Aversion = 1
	if res.Ops[0].Stat != want || h.stat("/a") != want {
		t.Fatalf("stat %+v want %+v", res.Ops[0].Stat, want)
	}
	acl, _, err := h.tree.GetACL("/a", aliceAuth)
	wantACL := []ACL{{Perms: PermRead | PermAdmin, Scheme: "digest", ID: alice.ID}, {Perms: PermRead, Scheme: "world", ID: "anyone"}}
	if err != nil || !slices.Equal(acl, wantACL) {
		t.Fatalf("ACL %v %v", acl, err)
	}
	// Now only alice administers it.
	wantErr(t, "bob setACL", h.do(0, []Identity{bob}, setACLOp("/a", OpenACL, -1)).Err, ErrNoAuth)
	h.must(0, aliceAuth, setACLOp("/a", OpenACL, 1))
	if h.stat("/a").Aversion != 2 {
		t.Fatal("aversion not bumped")
	}
}

func TestCheckOpChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/a", "", 0))
	before := clone(t, h.tree)
	res := h.do(0, nil, checkOp("/a", 0))
	if res.Err != nil || len(res.Events) != 0 || !h.tree.Equal(before) {
		t.Fatalf("check: %+v", res)
	}
	wantErr(t, "CheckVersion", h.tree.CheckVersion("/a", 1, nil), ErrBadVersion)
	wantErr(t, "CheckVersion", h.tree.CheckVersion("/a", 0, nil), nil)
	wantErr(t, "CheckVersion", h.tree.CheckVersion("/b", 0, nil), ErrNoNode)
}

func TestContainers(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.must(0, nil, createOp("/c", "", ModeContainer))
	h.must(0, nil, createOp("/c/inner", "", ModeContainer))
	h.must(0, nil, createOp("/c/inner/x", "", 0))
	h.must(sess, nil, createOp("/c/inner/e", "", ModeEphemeral))
	h.must(0, nil, createOp("/never", "", ModeContainer))

	res := h.do(0, nil, deleteOp("/c/inner/x", -1))
	if !h.exists("/c/inner") {
		t.Fatal("container with a child left was removed")
	}
	if len(res.Events) != 2 {
		t.Fatalf("events %v", res.Events)
	}

	// Closing the session removes the ephemeral, which empties /c/inner,
	// which empties /c: both containers go, in the same transaction.
	res = h.closeSession(sess)
	if h.exists("/c/inner") || h.exists("/c") {
		t.Fatal("emptied containers survived")
	}
	want := []Event{
		{Type: EventDeleted, Path: "/c/inner/e"}, {Type: EventChildrenChanged, Path: "/c/inner"},
		{Type: EventDeleted, Path: "/c/inner"}, {Type: EventChildrenChanged, Path: "/c"},
		{Type: EventDeleted, Path: "/c"}, {Type: EventChildrenChanged, Path: "/"},
	}
	if !eventsEqual(res.Events, want) {
		t.Fatalf("events %v want %v", res.Events, want)
	}
	if h.stat("/").Pzxid != h.zxid {
		t.Fatal("root pzxid not updated by container removal")
	}
	if !h.exists("/never") {
		t.Fatal("a container that never had children was removed")
	}

	// A multi that empties a container and refills it keeps it.
	h.must(0, nil, createOp("/k", "", ModeContainer))
	h.must(0, nil, createOp("/k/a", "", 0))
	res = h.multi(0, nil, deleteOp("/k/a", -1), createOp("/k/b", "", 0))
	if res.Err != nil || !h.exists("/k") {
		t.Fatalf("refilled container: %v, exists %v", res.Err, h.exists("/k"))
	}
	// Plain delete of a container is allowed too.
	h.must(0, nil, deleteOp("/k/b", -1))
	if h.exists("/k") {
		t.Fatal("container survived losing its last child")
	}
}

func TestMulti(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.must(0, nil, createOp("/a", "", 0))

	res := h.multi(sess, nil,
		createOp("/a/b", "1", 0),
		setDataOp("/a/b", "2", 0),
		checkOp("/a/b", 1),
		createOp("/a/s-", "", ModeEphemeralSequential),
		setACLOp("/a", OpenACL, 0),
		deleteOp("/a/b", 1),
	)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Ops) != 6 {
		t.Fatalf("%d results", len(res.Ops))
	}
	for i, r := range res.Ops {
		if r.Err != nil {
			t.Fatalf("op %d: %v", i, r.Err)
		}
	}
	zx := h.zxid
	if res.Ops[0].Stat.Czxid != zx || res.Ops[1].Stat.Version != 1 || res.Ops[3].Path != "/a/s-0000000001" || res.Ops[4].Stat.Aversion != 1 {
		t.Fatalf("results %+v", res.Ops)
	}
	want := []Event{
		{Type: EventCreated, Path: "/a/b"}, {Type: EventChildrenChanged, Path: "/a"},
		{Type: EventDataChanged, Path: "/a/b"},
		{Type: EventCreated, Path: "/a/s-0000000001"}, {Type: EventChildrenChanged, Path: "/a"},
		{Type: EventDeleted, Path: "/a/b"}, {Type: EventChildrenChanged, Path: "/a"},
	}
	if !eventsEqual(res.Events, want) {
		t.Fatalf("events %v", res.Events)
	}

	// Failure in the middle: nothing changes and the results follow
	// ZooKeeper's layout.
	before := clone(t, h.tree)
	res = h.multi(sess, nil,
		createOp("/a/x", "", 0),
		setDataOp("/a", "d", -1),
		createOp("/a/s-", "", ModeEphemeralSequential),
		setACLOp("/a", aliceOnly, -1),
		deleteOp("/a", -1), // fails: not empty
		createOp("/a/y", "", 0),
		checkOp("/nope", -1),
	)
	wantErr(t, "multi", res.Err, ErrNotEmpty)
	if len(res.Ops) != 7 {
		t.Fatalf("%d results", len(res.Ops))
	}
	for i, r := range res.Ops {
		switch {
		case i < 4:
			if r.Err != nil || r.Stat != (Stat{}) {
				t.Fatalf("op %d before failure: %+v", i, r)
			}
		case i == 4:
			wantErr(t, "failing op", r.Err, ErrNotEmpty)
		default:
			wantErr(t, "later op", r.Err, ErrRuntimeInconsistency)
		}
	}
	if len(res.Events) != 0 {
		t.Fatalf("events of a failed multi %v", res.Events)
	}
	if !h.tree.Equal(before) {
		t.Fatal("failed multi changed the tree")
	}
	// The rolled-back sequential create did not consume a number.
	if r := h.must(sess, nil, createOp("/a/s-", "", ModeEphemeralSequential)); r.Path != "/a/s-0000000002" {
		t.Fatalf("after rollback created %q", r.Path)
	}

	// Failure of the first op.
	res = h.multi(0, nil, deleteOp("/zzz", -1), createOp("/b", "", 0))
	wantErr(t, "first op", res.Ops[0].Err, ErrNoNode)
	wantErr(t, "second op", res.Ops[1].Err, ErrRuntimeInconsistency)
	if h.exists("/b") {
		t.Fatal("op after failure applied")
	}

	// An empty multi succeeds and changes nothing.
	res = h.multi(0, nil)
	if res.Err != nil || len(res.Ops) != 0 || len(res.Events) != 0 {
		t.Fatalf("empty multi %+v", res)
	}

	// A non-multi txn must carry exactly one op.
	res = h.apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/c", "", 0), createOp("/d", "", 0)}})
	wantErr(t, "two ops without multi", res.Err, ErrBadArguments)
	if h.exists("/c") {
		t.Fatal("applied")
	}
}

// TestMultiRollbackACLInterning checks that undoing setACL and deletes
// restores the ACL intern table exactly, including entries whose last user
// went away during the multi.
func TestMultiRollbackACLInterning(t *testing.T) {
	h := newHarness(t)
	h.must(0, superAuth, createACL("/only", aliceOnly))
	before := clone(t, h.tree)
	res := h.multi(0, superAuth,
		setACLOp("/only", OpenACL, -1),
		createACL("/other", aliceOnly),
		deleteOp("/other", -1),
		createACL("/third", []ACL{{Perms: PermRead, Scheme: "ip", ID: "10.0.0.0/8"}}),
		setDataOp("/missing", "", -1),
	)
	wantErr(t, "multi", res.Err, ErrNoNode)
	if !h.tree.Equal(before) {
		t.Fatal("rollback differs")
	}
	if len(h.tree.acls) != 3 { // OpenACL, readACL, aliceOnly
		t.Fatalf("%d interned ACLs", len(h.tree.acls))
	}
}

func TestSessions(t *testing.T) {
	h := newHarness(t)
	res := h.apply(&Txn{Kind: TxnCreateSession, Time: 1000, Timeout: 4000, Password: []byte("pw")})
	if res.SessionID != 1000<<12 {
		t.Fatalf("first session id %d", res.SessionID)
	}
	res2 := h.apply(&Txn{Kind: TxnCreateSession, Time: 5, Timeout: 6000})
	if res2.SessionID != res.SessionID+1 {
		t.Fatalf("second session id %d", res2.SessionID)
	}
	info, ok := h.tree.Session(res.SessionID)
	if !ok || info.Timeout != 4000 || string(info.Password) != "pw" {
		t.Fatalf("session %+v %v", info, ok)
	}
	ss := h.tree.Sessions()
	if len(ss) != 2 || ss[0].ID != res.SessionID || ss[1].ID != res2.SessionID || ss[1].Timeout != 6000 {
		t.Fatalf("sessions %+v", ss)
	}
	// Ids are never reused, even after every session is gone.
	h.closeSession(res.SessionID)
	h.closeSession(res2.SessionID)
	res3 := h.apply(&Txn{Kind: TxnCreateSession, Time: 1})
	if res3.SessionID != res2.SessionID+1 {
		t.Fatalf("third session id %d", res3.SessionID)
	}

	// With a zero clock the counter still starts positive.
	h2 := newHarness(t)
	r := h2.tree.Apply(&Txn{Kind: TxnCreateSession}, 2)
	if r.SessionID != 1 {
		t.Fatalf("zero-time session id %d", r.SessionID)
	}
}

func TestCloseSession(t *testing.T) {
	h := newHarness(t)
	s1, s2 := h.session(), h.session()
	h.must(0, nil, createOp("/app", "", 0))
	h.must(s1, nil, createOp("/app/b", "", ModeEphemeral))
	h.must(s1, nil, createOp("/app/a", "", ModeEphemeral))
	h.must(s1, nil, createOp("/z", "", ModeEphemeral))
	h.must(s2, nil, createOp("/app/other", "", ModeEphemeral))
	if got := h.tree.Ephemerals(s1, "/app/"); !slices.Equal(got, []string{"/app/a", "/app/b"}) {
		t.Fatalf("Ephemerals prefix %v", got)
	}
	if got := h.tree.Ephemerals(s1, " / "); len(got) != 3 {
		t.Fatalf("Ephemerals all %v", got)
	}

	res := h.closeSession(s1)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := []Event{
		{Type: EventDeleted, Path: "/app/a"}, {Type: EventChildrenChanged, Path: "/app"},
		{Type: EventDeleted, Path: "/app/b"}, {Type: EventChildrenChanged, Path: "/app"},
		{Type: EventDeleted, Path: "/z"}, {Type: EventChildrenChanged, Path: "/"},
	}
	if !eventsEqual(res.Events, want) {
		t.Fatalf("events %v", res.Events)
	}
	if _, ok := h.tree.Session(s1); ok {
		t.Fatal("session survived close")
	}
	if h.exists("/app/a") || !h.exists("/app/other") || h.tree.EphemeralCount() != 1 {
		t.Fatal("wrong ephemerals removed")
	}
	if st := h.stat("/app"); st.Pzxid != h.zxid || st.NumChildren != 1 {
		t.Fatalf("parent %+v", st)
	}

	// Closing again, or closing an unknown session, is a no-op.
	before := clone(t, h.tree)
	for _, id := range []int64{s1, 0, 424242} {
		if res := h.closeSession(id); res.Err != nil || len(res.Events) != 0 {
			t.Fatalf("close %d: %+v", id, res)
		}
	}
	if !h.tree.Equal(before) {
		t.Fatal("no-op close changed the tree")
	}

	// A late write from the closed session must not land, whatever it is.
	for _, op := range []Op{createOp("/late", "", 0), createOp("/late", "", ModeEphemeral), setDataOp("/app", "x", -1), deleteOp("/app/other", -1)} {
		res := h.do(s1, nil, op)
		wantErr(t, "late write", res.Err, ErrSessionExpired)
		wantErr(t, "late write op", res.Ops[0].Err, ErrSessionExpired)
	}
	res = h.multi(s1, nil, createOp("/late", "", 0), createOp("/late2", "", 0))
	wantErr(t, "late multi", res.Err, ErrSessionExpired)
	wantErr(t, "late multi op 0", res.Ops[0].Err, ErrSessionExpired)
	wantErr(t, "late multi op 1", res.Ops[1].Err, ErrRuntimeInconsistency)
	if !h.tree.Equal(before) {
		t.Fatal("late write changed the tree")
	}
}

func TestUnknownTxnKind(t *testing.T) {
	tr := New()
	res := tr.Apply(&Txn{Kind: 42}, 1)
	if !errors.Is(res.Err, ErrBadArguments) {
		t.Fatalf("got %v", res.Err)
	}
}

func TestSetConfigData(t *testing.T) {
	tr := New()
	size := tr.ApproximateDataSize()
	ev := tr.SetConfigData([]byte("server.1=a:1:1:participant\nversion=0"), 0)
	d, st, err := tr.Get("/zookeeper/config", nil)
	if err != nil || string(d) != "server.1=a:1:1:participant\nversion=0" || st.DataLength != 36 || st.Version != -1 || st.Mzxid != 0 {
		t.Fatalf("%q %+v %v", d, st, err)
	}
	if ev.Type != EventDataChanged || ev.Path != "/zookeeper/config" || !slices.Equal(ev.ACL, readACL) {
		t.Fatalf("event %+v", ev)
	}
	if tr.ApproximateDataSize() != size+36 {
		t.Fatal("data size")
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	// A later configuration: its zxid becomes the mzxid, the version
	// stays -1, and nothing else moves.
	tr.SetConfigData([]byte("v2"), 77)
	if _, st, _ := tr.Get("/zookeeper/config", nil); st.Mzxid != 77 || st.Version != -1 || st.DataLength != 2 || st.Czxid != 0 {
		t.Fatalf("after a second configuration: %+v", st)
	}
	if _, st, _ := tr.Get("/zookeeper", nil); st.Cversion != 0 || st.Pzxid != 0 {
		t.Fatalf("parent changed: %+v", st)
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestReads(t *testing.T) {
	h := newHarness(t)
	h.must(0, nil, createOp("/r", "data", 0))
	for _, n := range []string{"c", "a", "b"} {
		h.must(0, nil, createOp("/r/"+n, "", 0))
	}
	h.must(0, nil, createOp("/r/a/deep", "", 0))
	h.must(0, nil, createACL("/secret", aliceOnly))

	kids, st, err := h.tree.Children("/r", nil)
	if err != nil || !slices.Equal(kids, []string{"a", "b", "c"}) || st.NumChildren != 3 {
		t.Fatalf("Children %v %+v %v", kids, st, err)
	}
	if n, err := h.tree.AllChildrenNumber("/r"); n != 4 || err != nil {
		t.Fatalf("AllChildrenNumber %d %v", n, err)
	}
	if n, _ := h.tree.AllChildrenNumber("/"); n != h.tree.NodeCount()-1 {
		t.Fatalf("AllChildrenNumber(/) %d", n)
	}
	if _, err := h.tree.AllChildrenNumber("/nope"); !errors.Is(err, ErrNoNode) {
		t.Fatal(err)
	}
	if _, err := h.tree.Exists("/nope"); !errors.Is(err, ErrNoNode) {
		t.Fatal(err)
	}
	// exists checks no ACL; the others do.
	if _, err := h.tree.Exists("/secret"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Get":      second(h.tree.Get("/secret", []Identity{bob})),
		"Children": second(h.tree.Children("/secret", []Identity{bob})),
		"GetACL":   second(h.tree.GetACL("/secret", []Identity{bob})),
		"CheckACL": h.tree.CheckACL("/secret", PermRead, []Identity{bob}),
		"Check":    h.tree.CheckVersion("/secret", -1, []Identity{bob}),
	} {
		wantErr(t, name, err, ErrNoAuth)
	}
	if _, _, err := h.tree.Get("/nope", nil); !errors.Is(err, ErrNoNode) {
		t.Fatal(err)
	}
	if d, _, err := h.tree.Get("/secret", []Identity{alice}); err != nil || d != nil {
		t.Fatal(err)
	}
}

func second[A, B any](_ A, _ B, err error) error { return err }

func TestGetACLPermissions(t *testing.T) {
	h := newHarness(t)
	hashed := []ACL{
		{Perms: PermRead, Scheme: "digest", ID: "reader:c2VjcmV0"},
		{Perms: PermAdmin, Scheme: "digest", ID: alice.ID},
		{Perms: PermRead, Scheme: "ip", ID: "10.0.0.0/8"},
	}
	h.must(0, nil, createACL("/n", hashed))
	reader := Identity{Scheme: "digest", ID: "reader:c2VjcmV0"}

	// READ without ADMIN: digest hashes are masked.
	acl, _, err := h.tree.GetACL("/n", []Identity{reader})
	if err != nil {
		t.Fatal(err)
	}
	want := []ACL{
		{Perms: PermRead, Scheme: "digest", ID: "reader:x"},
		{Perms: PermAdmin, Scheme: "digest", ID: "alice:x"},
		{Perms: PermRead, Scheme: "ip", ID: "10.0.0.0/8"},
	}
	if !slices.Equal(acl, want) {
		t.Fatalf("masked %v", acl)
	}
	// ADMIN alone is enough, and shows the hashes.
	acl, _, err = h.tree.GetACL("/n", []Identity{alice})
	if err != nil || !slices.Equal(acl, hashed) {
		t.Fatalf("admin %v %v", acl, err)
	}
	// By ip, READ.
	if _, _, err := h.tree.GetACL("/n", []Identity{{Scheme: "ip", ID: "10.9.8.7"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.tree.GetACL("/n", []Identity{{Scheme: "ip", ID: "11.9.8.7"}}); !errors.Is(err, ErrNoAuth) {
		t.Fatal(err)
	}
	// Mutating the returned list does not touch the tree.
	acl[0].ID = "mutated"
	if again, _, _ := h.tree.GetACL("/n", []Identity{alice}); again[0].ID != "reader:c2VjcmV0" {
		t.Fatal("GetACL returned shared storage")
	}
}

// TestACLDenialPerOp denies each op by each scheme and allows it by a
// matching identity of the same scheme.
func TestACLDenialPerOp(t *testing.T) {
	schemes := []struct {
		name      string
		acl       func(perm int32) []ACL
		allowed   []Identity
		forbidden []Identity
	}{
		{"world", func(p int32) []ACL { return []ACL{{Perms: p, Scheme: "world", ID: "anyone"}} }, nil, nil},
		{"digest", func(p int32) []ACL { return []ACL{{Perms: p, Scheme: "digest", ID: alice.ID}} },
			[]Identity{alice}, []Identity{bob, {Scheme: "digest", ID: "alice:other"}}},
		{"ip", func(p int32) []ACL { return []ACL{{Perms: p, Scheme: "ip", ID: "192.168.1.0/24"}} },
			[]Identity{{Scheme: "ip", ID: "192.168.1.77"}}, []Identity{{Scheme: "ip", ID: "192.168.2.1"}, {Scheme: "digest", ID: "192.168.1.77"}}},
	}
	ops := []struct {
		name string
		perm int32
		op   func(h *harness) Op // run against /t (and /t/c)
	}{
		{"create", PermCreate, func(*harness) Op { return createOp("/t/new", "", 0) }},
		{"delete", PermDelete, func(*harness) Op { return deleteOp("/t/c", -1) }},
		{"setData", PermWrite, func(*harness) Op { return setDataOp("/t", "x", -1) }},
		{"setACL", PermAdmin, func(*harness) Op { return setACLOp("/t", OpenACL, -1) }},
		{"check", PermRead, func(*harness) Op { return checkOp("/t", -1) }},
	}
	for _, s := range schemes {
		for _, o := range ops {
			t.Run(s.name+"/"+o.name, func(t *testing.T) {
				// The node grants every permission but the one needed; the
				// op must fail. Then it grants exactly that permission to
				// the scheme's identity; the op must succeed for it and
				// fail for others.
				for _, grant := range []int32{PermAll &^ o.perm, o.perm} {
					h := newHarness(t)
					h.must(0, nil, createOp("/t", "", 0))
					h.must(0, nil, createOp("/t/c", "", 0))
					h.must(0, superAuth, setACLOp("/t", s.acl(grant), -1))
					res := h.do(0, s.allowed, o.op(h))
					if grant == o.perm {
						wantErr(t, "allowed", res.Err, nil)
					} else {
						wantErr(t, "missing perm", res.Err, ErrNoAuth)
					}
					if s.forbidden != nil && grant == o.perm {
						h2 := newHarness(t)
						h2.must(0, nil, createOp("/t", "", 0))
						h2.must(0, nil, createOp("/t/c", "", 0))
						h2.must(0, superAuth, setACLOp("/t", s.acl(grant), -1))
						wantErr(t, "forbidden identity", h2.do(0, s.forbidden, o.op(h2)).Err, ErrNoAuth)
						wantErr(t, "super", h2.do(0, superAuth, o.op(h2)).Err, nil)
					}
				}
			})
		}
	}
}
