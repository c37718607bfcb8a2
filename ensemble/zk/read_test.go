package zk_test

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// readTree is /r with data "d" and children a, b; /secret readable by the
// x509 identity O=ops only; /ann readable by digest user ann only.
func readTree(t *testing.T) (*fixture, zk.Session) {
	f := newFixture(t)
	s := f.session()
	f.mustWrite(s, wire.OpCreate, &wire.CreateRequest{Path: "/r", Data: []byte("d"), ACL: open})
	f.create(s, "/r/a", nil)
	f.create(s, "/r/b", nil)
	f.mustWrite(s, wire.OpCreate, &wire.CreateRequest{Path: "/r/e", ACL: open, Flags: wire.FlagEphemeral})
	f.create(s, "/secret", opsOnly)
	f.create(s, "/ann", annOnly)
	return f, s
}

// Each read's reply, the watch it sets, and its errors: exists checks no
// ACL and watches a missing node's creation; the others need READ and set
// no watch when they fail.
func TestReadNode(t *testing.T) {
	f, s := readTree(t)
	ops := f.session(opsID)
	for _, c := range []struct {
		name   string
		s      zk.Session
		op     int32
		path   string
		want   wire.Code
		watch  []zk.WatchReg
		decode func(d *wire.Decoder) string
		body   string // what decode makes of the reply's body
	}{
		{name: "exists", op: wire.OpExists, path: "/r", watch: []zk.WatchReg{{Kind: zk.WatchData, Path: "/r"}},
			decode: numChildren, body: "3"},
		{name: "exists of a missing node", op: wire.OpExists, path: "/none", want: wire.ErrNoNode,
			watch: []zk.WatchReg{{Kind: zk.WatchExist, Path: "/none"}}},
		{name: "exists without READ", op: wire.OpExists, path: "/secret", watch: []zk.WatchReg{{Kind: zk.WatchData, Path: "/secret"}},
			decode: numChildren, body: "0"},
		{name: "getData", op: wire.OpGetData, path: "/r", watch: []zk.WatchReg{{Kind: zk.WatchData, Path: "/r"}},
			decode: data, body: "d"},
		{name: "getData without READ", op: wire.OpGetData, path: "/secret", want: wire.ErrNoAuth},
		{name: "getData with the x509 identity", s: ops, op: wire.OpGetData, path: "/secret", watch: []zk.WatchReg{{Kind: zk.WatchData, Path: "/secret"}},
			decode: data, body: ""},
		{name: "getData of a missing node", op: wire.OpGetData, path: "/none", want: wire.ErrNoNode},
		// Reads take any path, as ZooKeeper's do: one it would not create
		// names no node, and the empty one is the root.
		{name: "getData of a bad path", op: wire.OpGetData, path: "/r/", want: wire.ErrNoNode},
		{name: "getChildren of the empty path", op: wire.OpGetChildren, path: "", watch: []zk.WatchReg{{Kind: zk.WatchChild, Path: ""}},
			decode: children, body: "ann,r,secret,zookeeper"},
		{name: "getChildren", op: wire.OpGetChildren, path: "/r", watch: []zk.WatchReg{{Kind: zk.WatchChild, Path: "/r"}},
			decode: children, body: "a,b,e"},
		{name: "getChildren of a leaf", op: wire.OpGetChildren, path: "/r/a", watch: []zk.WatchReg{{Kind: zk.WatchChild, Path: "/r/a"}},
			decode: children, body: ""},
		{name: "getChildren2", op: wire.OpGetChildren2, path: "/r", watch: []zk.WatchReg{{Kind: zk.WatchChild, Path: "/r"}},
			decode: func(d *wire.Decoder) string {
				var r wire.GetChildren2Response
				r.Decode(d)
				return sorted(r.Children) + " " + strconv.Itoa(int(r.Stat.NumChildren))
			}, body: "a,b,e 3"},
		{name: "getChildren without READ", op: wire.OpGetChildren2, path: "/ann", want: wire.ErrNoAuth},
		{name: "exists of a bad path", op: wire.OpExists, path: "//", want: wire.ErrNoNode,
			watch: []zk.WatchReg{{Kind: zk.WatchExist, Path: "//"}}},
		{name: "exists of a path with a NUL", op: wire.OpExists, path: "/r\x00", want: wire.ErrBadArguments},
		{name: "getData of a path with a NUL", op: wire.OpGetData, path: "/r\x00", want: wire.ErrNoNode},
	} {
		sess := c.s
		if sess.ID == 0 {
			sess = s
		}
		h, d, res := f.read(sess, c.op, &wire.PathWatchRequest{Path: c.path, Watch: true})
		if h.Err != c.want || h.Xid != 2 || h.Zxid != f.zxid {
			t.Errorf("%s: %+v, want %v", c.name, h, c.want)
		}
		if !slices.Equal(res.Watches, c.watch) {
			t.Errorf("%s: watches %+v, want %+v", c.name, res.Watches, c.watch)
		}
		if c.decode != nil {
			if got := c.decode(d); got != c.body || d.Err() != nil || d.Remaining() != 0 {
				t.Errorf("%s: body %q (%v, %d bytes left), want %q", c.name, got, d.Err(), d.Remaining(), c.body)
			}
		} else if d.Remaining() != 0 {
			t.Errorf("%s: an error reply with %d body bytes", c.name, d.Remaining())
		}
		// Without the watch flag the same read sets none.
		if _, _, res := f.read(sess, c.op, &wire.PathWatchRequest{Path: c.path}); len(res.Watches) != 0 {
			t.Errorf("%s without watch: watches %+v", c.name, res.Watches)
		}
	}
	_, d, _ := f.read(s, wire.OpGetData, &wire.PathWatchRequest{Path: "/r"})
	var gd wire.GetDataResponse
	if err := gd.Decode(d); err != nil || string(gd.Data) != "d" || gd.Stat.NumChildren != 3 || gd.Stat.Cversion != 3 {
		t.Errorf("getData /r = %+v %v", gd, err)
	}
	_, d, _ = f.read(s, wire.OpGetChildren, &wire.PathWatchRequest{Path: "/r/a"})
	var gc wire.GetChildrenResponse
	if err := gc.Decode(d); err != nil || gc.Children == nil || len(gc.Children) != 0 {
		t.Errorf("children of a leaf = %#v %v; want an empty list", gc.Children, err)
	}
}

// getACL, getAllChildrenNumber and getEphemerals.
func TestReadPath(t *testing.T) {
	f, s := readTree(t)
	other := f.session()
	f.mustWrite(other, wire.OpCreate, &wire.CreateRequest{Path: "/r/o", ACL: open, Flags: wire.FlagEphemeral})

	h, d, _ := f.read(s, wire.OpGetACL, &wire.PathRequest{Path: "/ann"})
	if h.Err != wire.ErrNoAuth {
		t.Errorf("getACL without READ or ADMIN: %v", h.Err)
	}
	ann := f.session(annID)
	h, d, _ = f.read(ann, wire.OpGetACL, &wire.PathRequest{Path: "/ann"})
	var ga wire.GetACLResponse
	if err := ga.Decode(d); h.Err != wire.OK || err != nil || !slices.Equal(ga.ACL, annOnly) || ga.Stat.Aversion != 0 {
		t.Errorf("getACL /ann = %v %+v %v", h.Err, ga, err)
	}

	h, d, _ = f.read(s, wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: "/r"})
	var n wire.GetAllChildrenNumberResponse
	if err := n.Decode(d); h.Err != wire.OK || err != nil || n.TotalNumber != 4 {
		t.Errorf("getAllChildrenNumber /r = %v %d %v", h.Err, n.TotalNumber, err)
	}
	if h, _, _ := f.read(s, wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: "/secret"}); h.Err != wire.ErrNoAuth {
		t.Errorf("getAllChildrenNumber without READ: %v", h.Err)
	}
	if h, _, _ := f.read(s, wire.OpGetACL, &wire.PathRequest{Path: "r"}); h.Err != wire.ErrNoNode {
		t.Errorf("getACL of a bad path: %v", h.Err)
	}

	// getEphemerals lists the session's own, by a prefix ZooKeeper does
	// not validate.
	for prefix, want := range map[string][]string{"": {"/r/e"}, "/r": {"/r/e"}, "/r/o": {}, "r": {}} {
		h, d, _ := f.read(s, wire.OpGetEphemerals, &wire.PathRequest{Path: prefix})
		var ge wire.GetEphemeralsResponse
		if err := ge.Decode(d); h.Err != wire.OK || err != nil || !slices.Equal(ge.Ephemerals, want) {
			t.Errorf("getEphemerals %q = %v %#v %v, want %v", prefix, h.Err, ge.Ephemerals, err, want)
		}
	}
}

// multiRead answers each op on its own; an op that is no read ends the
// request.
func TestMultiRead(t *testing.T) {
	f, s := readTree(t)
	h, d, _ := f.read(s, wire.OpMultiRead, &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpGetData, Path: "/r"},
		{Type: wire.OpGetChildren, Path: "/r"},
		{Type: wire.OpGetData, Path: "/secret"},
		{Type: wire.OpGetChildren, Path: "/none"},
		{Type: wire.OpGetData, Path: "bad"},
	}})
	var mr wire.MultiResponse
	if err := mr.Decode(d); h.Err != wire.OK || err != nil || len(mr.Results) != 5 {
		t.Fatalf("multiRead: %v %+v %v", h.Err, mr, err)
	}
	r := mr.Results
	if r[0].Type != wire.OpGetData || string(r[0].Data) != "d" || r[1].Type != wire.OpGetChildren || sorted(r[1].Children) != "a,b,e" {
		t.Errorf("multiRead reads: %+v %+v", r[0], r[1])
	}
	for i, want := range map[int]wire.Code{2: wire.ErrNoAuth, 3: wire.ErrNoNode, 4: wire.ErrNoNode} {
		if r[i].Type != wire.OpError || r[i].Err != want {
			t.Errorf("multiRead result %d = %+v, want %v", i, r[i], want)
		}
	}
	req := request(t, 2, wire.OpMultiRead, &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpGetData, Path: "/r"}, {Type: wire.OpCheck, Path: "/r", Version: -1},
	}})
	var res zk.Result
	zk.Read(f.tree, s, &req, f.zxid, &res)
	// As ZooKeeper 3.8: MarshallingError, with the results of the reads
	// before the write.
	h, d = reply(t, res.Frame)
	mr = wire.MultiResponse{}
	if err := mr.Decode(d); h.Err != wire.ErrMarshallingError || err != nil || len(mr.Results) != 1 || string(mr.Results[0].Data) != "d" {
		t.Errorf("multiRead with a write: %v %+v %v", h.Err, mr, err)
	}
}

// whoAmI lists the connection's identities, a digest one by user name, in
// ZooKeeper's set order (TestWhoAmIOrderAsZooKeeper).
func TestWhoAmI(t *testing.T) {
	f := newFixture(t)
	s := f.session(annID, opsID)
	_, d, _ := f.read(s, wire.OpWhoAmI, nil)
	var r wire.WhoAmIResponse
	if err := r.Decode(d); err != nil {
		t.Fatal(err)
	}
	want := []wire.ClientInfo{{AuthScheme: "digest", User: "ann"}, {AuthScheme: "ip", User: "127.0.0.1"}, {AuthScheme: "x509", User: "O=ops"}}
	if !slices.Equal(r.ClientInfo, want) {
		t.Errorf("whoAmI = %+v, want %+v", r.ClientInfo, want)
	}
}

// auth adds a digest identity (once) or re-authenticates the certificate;
// anything else is AuthFailed. A list taken before stays as it was:
// requests read before keep theirs.
func TestAuth(t *testing.T) {
	base := []tree.Identity{{Scheme: "ip", ID: "10.0.0.1"}}
	certs := []tree.Identity{opsID, {Scheme: "x509", ID: "CN=h1"}}
	for _, c := range []struct {
		name  string
		auth  []tree.Identity
		certs []tree.Identity
		p     wire.AuthPacket
		want  []tree.Identity
		why   zk.AuthRefusal
	}{
		{"digest", base, nil, wire.AuthPacket{Scheme: "digest", Auth: []byte("ann:secret")}, append(slices.Clone(base), annID), zk.AuthAccepted},
		{"digest again", append(slices.Clone(base), annID), nil, wire.AuthPacket{Scheme: "digest", Auth: []byte("ann:secret")}, append(slices.Clone(base), annID), zk.AuthAccepted},
		{"digest without a colon", base, nil, wire.AuthPacket{Scheme: "digest", Auth: []byte("ann")},
			append(slices.Clone(base), tree.Identity{Scheme: "digest", ID: zk.DigestID("ann")}), zk.AuthAccepted},
		{"ip", base, nil, wire.AuthPacket{Scheme: "ip", Auth: []byte("10.9.9.9")}, base, zk.AuthAccepted},
		{"unknown scheme", base, nil, wire.AuthPacket{Scheme: "kerberos", Auth: []byte("a:b")}, base, zk.AuthBadScheme},
		{"x509 with a certificate", append(slices.Clone(base), opsID), certs, wire.AuthPacket{Scheme: "x509"}, append(slices.Clone(base), certs...), zk.AuthAccepted},
		{"x509 without one", base, nil, wire.AuthPacket{Scheme: "x509", Auth: []byte("O=ops")}, base, zk.AuthBadScheme},
		{"user name too long", base, nil, wire.AuthPacket{Scheme: "digest", Auth: []byte(strings.Repeat("u", 300) + ":pw")}, base, zk.AuthTooLong},
	} {
		ids := zk.NewIdentities(c.auth...)
		before := ids.List()
		why := ids.Auth(c.certs, &c.p)
		if got := ids.List(); why != c.why || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v %+v, want %v %+v", c.name, why, got, c.why, c.want)
		}
		if !slices.Equal(before, c.auth) {
			t.Errorf("%s: a list taken before was modified: %+v", c.name, before)
		}
	}
	if id := zk.DigestID("ann:secret"); id != "ann:7RJfAeIvrl4zdj6sS2fXrQHDvHM=" {
		t.Errorf("DigestID = %q", id)
	}
}

// A connection holds at most MaxIdentities: one more is AuthFailed, a
// duplicate is not, and a list taken before an addition keeps its length.
func TestAuthCap(t *testing.T) {
	ids := zk.NewIdentities(tree.Identity{Scheme: "ip", ID: "10.0.0.1"})
	var lists [][]tree.Identity
	for i := 1; i < zk.MaxIdentities; i++ {
		lists = append(lists, ids.List())
		if why := ids.Auth(nil, &wire.AuthPacket{Scheme: "digest", Auth: fmt.Appendf(nil, "u%d:pw", i)}); why != zk.AuthAccepted {
			t.Fatalf("identity %d: %v", i, why)
		}
	}
	if ids.Len() != zk.MaxIdentities {
		t.Fatalf("Len = %d", ids.Len())
	}
	if why := ids.Auth(nil, &wire.AuthPacket{Scheme: "digest", Auth: []byte("u1:pw")}); why != zk.AuthAccepted {
		t.Errorf("a duplicate at the cap: %v", why)
	}
	if why := ids.Auth(nil, &wire.AuthPacket{Scheme: "digest", Auth: []byte("one:more")}); why != zk.AuthTooMany {
		t.Errorf("one over the cap: %v", why)
	}
	for i, l := range lists {
		if len(l) != i+1 {
			t.Errorf("list %d grew to %d", i, len(l))
		}
	}
}

// addWatch, checkWatches and removeWatches.
func TestWatchRequests(t *testing.T) {
	f, s := readTree(t)
	for _, c := range []struct {
		name  string
		mode  int32
		path  string
		want  wire.Code
		watch []zk.WatchReg
	}{
		{"persistent", wire.AddWatchPersistent, "/r", wire.OK, []zk.WatchReg{{Kind: zk.WatchPersistent, Path: "/r"}}},
		{"recursive", wire.AddWatchPersistentRecursive, "/none", wire.OK, []zk.WatchReg{{Kind: zk.WatchRecursive, Path: "/none"}}},
		{"unknown mode", 7, "/r", wire.ErrMarshallingError, nil},
		{"bad path", wire.AddWatchPersistent, "/r/", wire.OK, []zk.WatchReg{{Kind: zk.WatchPersistent, Path: "/r/"}}},
	} {
		h, d, res := f.read(s, wire.OpAddWatch, &wire.AddWatchRequest{Path: c.path, Mode: c.mode})
		if h.Err != c.want || !slices.Equal(res.Watches, c.watch) {
			t.Errorf("addWatch %s: %v %+v", c.name, h.Err, res.Watches)
		}
		// ZooKeeper's answer has an ErrorResponse body of 0.
		if c.want == wire.OK {
			var er wire.ErrorResponse
			if err := er.Decode(d); err != nil || d.Remaining() != 0 {
				t.Errorf("addWatch %s body: %v", c.name, err)
			}
		}
	}
	all := []zk.WatchKind{zk.WatchChild, zk.WatchData, zk.WatchExist, zk.WatchPersistent, zk.WatchRecursive}
	for typ, kinds := range map[int32][]zk.WatchKind{
		wire.WatcherChildren: {zk.WatchChild},
		wire.WatcherData:     {zk.WatchData, zk.WatchExist},
		wire.WatcherAny:      all,
	} {
		for _, op := range []int32{wire.OpCheckWatches, wire.OpRemoveWatches} {
			_, _, res := f.read(s, op, &wire.RemoveWatchesRequest{Path: "/r", Type: typ})
			u := res.Unwatch
			if res.Frame != nil || u == nil || u.Path != "/r" || !slices.Equal(u.Kinds, kinds) || u.Remove != (op == wire.OpRemoveWatches) {
				t.Fatalf("%s type %d: %+v", wire.OpName(op), typ, u)
			}
			if h, _ := reply(t, u.Reply(true)); h.Err != wire.OK || h.Xid != 2 || h.Zxid != f.zxid {
				t.Errorf("%s found: %+v", wire.OpName(op), h)
			}
			if h, _ := reply(t, u.Reply(false)); h.Err != wire.ErrNoWatcher {
				t.Errorf("%s not found: %+v", wire.OpName(op), h)
			}
		}
	}
	if h, _, res := f.read(s, wire.OpRemoveWatches, &wire.RemoveWatchesRequest{Path: "/r", Type: 9}); h.Err != wire.ErrMarshallingError || res.Unwatch != nil {
		t.Errorf("removeWatches of an unknown type: %v", h.Err)
	}
}

// setWatches re-registers a reconnecting client's watches, and fires at
// once those whose change it missed: only if the session may read what
// changed (a deletion always), as watches obey READ.
func TestSetWatches(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	f.create(s, "/old", nil)    // unchanged since the client's zxid
	f.create(s, "/kids", nil)   // gains a child after it
	f.create(s, "/data", nil)   // changes after it
	f.create(s, "/hidden", nil) // changes after it, then turns unreadable
	f.create(s, "/seen", opsOnly)
	rel := f.zxid
	f.create(s, "/kids/k", nil)
	f.mustWrite(s, wire.OpSetData, &wire.SetDataRequest{Path: "/data", Data: []byte("x"), Version: -1})
	f.mustWrite(s, wire.OpSetData, &wire.SetDataRequest{Path: "/hidden", Data: []byte("x"), Version: -1})
	f.mustWrite(s, wire.OpSetACL, &wire.SetACLRequest{Path: "/hidden", ACL: opsOnly, Version: -1})
	f.mustWrite(f.session(opsID), wire.OpSetData, &wire.SetDataRequest{Path: "/seen", Data: []byte("x"), Version: -1})
	f.create(s, "/born", nil)

	sw := &wire.SetWatches2{
		RelativeZxid:               rel,
		DataWatches:                []string{"/old", "/data", "/gone", "/hidden", "/seen"},
		ExistWatches:               []string{"/born", "/unborn"},
		ChildWatches:               []string{"/old", "/kids", "/gone"},
		PersistentWatches:          []string{"/p"},
		PersistentRecursiveWatches: []string{"/q"},
	}
	ev := func(typ int32, path string) wire.WatcherEvent {
		return wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: path}
	}
	for _, c := range []struct {
		name  string
		s     zk.Session
		fires []wire.WatcherEvent
	}{
		{"without the x509 identity", s, []wire.WatcherEvent{
			ev(wire.EventNodeDataChanged, "/data"), ev(wire.EventNodeDeleted, "/gone"),
			ev(wire.EventNodeCreated, "/born"),
			ev(wire.EventNodeChildrenChanged, "/kids"), ev(wire.EventNodeDeleted, "/gone"),
		}},
		{"with it", f.session(opsID), []wire.WatcherEvent{
			ev(wire.EventNodeDataChanged, "/data"), ev(wire.EventNodeDeleted, "/gone"),
			ev(wire.EventNodeDataChanged, "/hidden"), ev(wire.EventNodeDataChanged, "/seen"),
			ev(wire.EventNodeCreated, "/born"),
			ev(wire.EventNodeChildrenChanged, "/kids"), ev(wire.EventNodeDeleted, "/gone"),
		}},
	} {
		for _, op := range []int32{wire.OpSetWatches2, wire.OpSetWatches} {
			body := encodable(sw)
			wantWatches := []zk.WatchReg{
				{Kind: zk.WatchData, Path: "/old"}, {Kind: zk.WatchExist, Path: "/unborn"}, {Kind: zk.WatchChild, Path: "/old"},
				{Kind: zk.WatchPersistent, Path: "/p"}, {Kind: zk.WatchRecursive, Path: "/q"},
			}
			if op == wire.OpSetWatches {
				// The first version knows no persistent watches.
				body = &wire.SetWatches{RelativeZxid: sw.RelativeZxid, DataWatches: sw.DataWatches, ExistWatches: sw.ExistWatches, ChildWatches: sw.ChildWatches}
				wantWatches = wantWatches[:3]
			}
			h, d, res := f.read(c.s, op, body)
			if h.Err != wire.OK || d.Remaining() != 0 {
				t.Errorf("%s %s: %v", wire.OpName(op), c.name, h.Err)
			}
			if !slices.Equal(res.Fires, c.fires) {
				t.Errorf("%s %s: fires\n%+v, want\n%+v", wire.OpName(op), c.name, res.Fires, c.fires)
			}
			if !slices.Equal(res.Watches, wantWatches) {
				t.Errorf("%s %s: watches %+v, want %+v", wire.OpName(op), c.name, res.Watches, wantWatches)
			}
		}
	}
}

// Which watches each change event fires.
func TestFires(t *testing.T) {
	for _, c := range []struct {
		ev        tree.EventType
		typ       int32
		oneShot   []zk.WatchKind
		recursive bool
	}{
		{tree.EventCreated, wire.EventNodeCreated, []zk.WatchKind{zk.WatchData, zk.WatchExist}, true},
		{tree.EventDeleted, wire.EventNodeDeleted, []zk.WatchKind{zk.WatchData, zk.WatchExist, zk.WatchChild}, true},
		{tree.EventDataChanged, wire.EventNodeDataChanged, []zk.WatchKind{zk.WatchData, zk.WatchExist}, true},
		{tree.EventChildrenChanged, wire.EventNodeChildrenChanged, []zk.WatchKind{zk.WatchChild}, false},
	} {
		typ, oneShot, recursive, ok := zk.Fires(c.ev)
		if !ok || typ != c.typ || !slices.Equal(oneShot, c.oneShot) || recursive != c.recursive {
			t.Errorf("Fires(%d) = %d %v %v %v", c.ev, typ, oneShot, recursive, ok)
		}
	}
	if _, _, _, ok := zk.Fires(0); ok {
		t.Error("Fires of no event type reported watches")
	}
}

// Decode classifies every opcode and rejects a body that does not decode;
// an unknown opcode is no error (it is answered Unimplemented).
func TestDecode(t *testing.T) {
	for op, want := range map[int32]zk.Kind{
		wire.OpPing: zk.KindPing, wire.OpAuth: zk.KindAuth, wire.OpCloseSession: zk.KindCloseSession,
		wire.OpCreate: zk.KindWrite, wire.OpCreate2: zk.KindWrite, wire.OpCreateContainer: zk.KindWrite, wire.OpCreateTTL: zk.KindWrite,
		wire.OpDelete: zk.KindWrite, wire.OpSetData: zk.KindWrite, wire.OpSetACL: zk.KindWrite, wire.OpCheck: zk.KindWrite, wire.OpMulti: zk.KindWrite,
		wire.OpSync: zk.KindSync, wire.OpReconfig: zk.KindReconfig,
		wire.OpExists: zk.KindRead, wire.OpGetData: zk.KindRead, wire.OpGetChildren: zk.KindRead, wire.OpGetChildren2: zk.KindRead,
		wire.OpGetACL: zk.KindRead, wire.OpGetAllChildrenNumber: zk.KindRead, wire.OpGetEphemerals: zk.KindRead, wire.OpWhoAmI: zk.KindRead,
		wire.OpSetWatches: zk.KindRead, wire.OpSetWatches2: zk.KindRead, wire.OpAddWatch: zk.KindRead,
		wire.OpCheckWatches: zk.KindRead, wire.OpRemoveWatches: zk.KindRead, wire.OpMultiRead: zk.KindRead,
		999: zk.KindUnknown,
	} {
		if got := zk.KindOf(op); got != want {
			t.Errorf("KindOf(%s) = %d, want %d", wire.OpName(op), got, want)
		}
	}
	req := request(t, 3, 999, &wire.PathRequest{Path: "/ignored"})
	if req.Kind() != zk.KindUnknown || req.Xid != 3 {
		t.Errorf("unknown opcode: %+v", req)
	}
	for _, op := range []int32{wire.OpGetData, wire.OpCreate, wire.OpMulti, wire.OpSync, wire.OpAuth, wire.OpSetWatches2, wire.OpReconfig} {
		d := wire.NewDecoder([]byte{0, 0, 0, 9, 'a'})
		if _, err := zk.Decode(wire.RequestHeader{Xid: 1, Opcode: op}, d); err == nil {
			t.Errorf("%s with a truncated body decoded", wire.OpName(op))
		}
	}
	req = request(t, 4, wire.OpSetData, &wire.SetDataRequest{Path: "/a", Version: 2})
	if req.Path != "/a" || req.Version != 2 || req.Kind() != zk.KindWrite {
		t.Errorf("setData request = %+v", req)
	}
}

// The replies of the requests the member answers without the tree.
func TestPlainReplies(t *testing.T) {
	if h, d := reply(t, zk.OKReply(7, 9)); h != (wire.ReplyHeader{Xid: 7, Zxid: 9}) || d.Remaining() != 0 {
		t.Errorf("OKReply: %+v", h)
	}
	h, d := reply(t, zk.SyncReply(7, 9, "/s"))
	var sr wire.SyncResponse
	if err := sr.Decode(d); err != nil || h.Err != wire.OK || sr.Path != "/s" {
		t.Errorf("SyncReply: %+v %+v", h, sr)
	}
	h, d = reply(t, zk.ReconfigReply(7, 9, []byte("server.1=a:1:0:participant\nversion=5"), wire.Stat{Mzxid: 5, Version: -1, DataLength: 36}))
	var gd wire.GetDataResponse
	if err := gd.Decode(d); err != nil || h.Err != wire.OK || string(gd.Data) != "server.1=a:1:0:participant\nversion=5" ||
		gd.Stat.Mzxid != 5 || gd.Stat.Version != -1 || gd.Stat.DataLength != 36 {
		t.Errorf("ReconfigReply: %+v %q %+v", h, gd.Data, gd.Stat)
	}
	h, d = reply(t, zk.NotificationFrame(wire.WatcherEvent{Type: wire.EventNodeDeleted, State: wire.StateSyncConnected, Path: "/n"}, 5))
	var we wire.WatcherEvent
	if err := we.Decode(d); err != nil || h != (wire.ReplyHeader{Xid: wire.XidNotification, Zxid: 5}) || we.Path != "/n" || we.Type != wire.EventNodeDeleted {
		t.Errorf("NotificationFrame: %+v %+v", h, we)
	}
}

func numChildren(d *wire.Decoder) string {
	var st wire.Stat
	_ = st.Decode(d)
	return strconv.Itoa(int(st.NumChildren))
}

func data(d *wire.Decoder) string {
	var r wire.GetDataResponse
	_ = r.Decode(d)
	return string(r.Data)
}

func children(d *wire.Decoder) string {
	var r wire.GetChildrenResponse
	_ = r.Decode(d)
	return sorted(r.Children)
}

func sorted(s []string) string {
	s = slices.Clone(s)
	slices.Sort(s)
	return strings.Join(s, ",")
}

// whoAmI's order is the one a real ZooKeeper 3.8.0 answered for the same
// identities (connections from 127.0.0.1).
func TestWhoAmIOrderAsZooKeeper(t *testing.T) {
	digest := func(cred string) tree.Identity { return tree.Identity{Scheme: "digest", ID: zk.DigestID(cred)} }
	for _, c := range []struct {
		auth []tree.Identity
		want []string
	}{
		// The fixture's sessions hold the address 127.0.0.1 already.
		{[]tree.Identity{digest("u1:pw1")}, []string{"digest:u1", "ip:127.0.0.1"}},
		{[]tree.Identity{digest("u:p"), digest("v:q")}, []string{"ip:127.0.0.1", "digest:u", "digest:v"}},
		{[]tree.Identity{digest("nocolon")}, []string{"digest:nocolon", "ip:127.0.0.1"}},
	} {
		f := newFixture(t)
		_, d, _ := f.read(f.session(c.auth...), wire.OpWhoAmI, nil)
		var r wire.WhoAmIResponse
		if err := r.Decode(d); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ci := range r.ClientInfo {
			got = append(got, ci.AuthScheme+":"+ci.User)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("whoAmI of %v = %v, want %v", c.auth, got, c.want)
		}
	}
}

// A read whose reply would pass MaxReply is answered MARSHALLINGERROR,
// after encoding about MaxReply at most: the review's amplification, a
// multiRead of a thousand getChildren of a node with 19,000 children,
// asked for about 200 MB from a 16 KB request. A getChildren that fits
// is answered whole, and one that does not sets no watch.
func TestReplyBound(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	f.create(s, "/m", nil)
	name := strings.Repeat("c", 20)
	for i := range 19_000 {
		f.create(s, "/m/"+name+strconv.Itoa(i), nil)
	}
	ops := make([]wire.MultiOp, 1000)
	for i := range ops {
		ops[i] = wire.MultiOp{Type: wire.OpGetChildren, Path: "/m"}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h, _, res := f.read(s, wire.OpMultiRead, &wire.MultiRequest{Ops: ops})
	runtime.ReadMemStats(&after)
	if h.Err != wire.ErrMarshallingError || !res.TooLarge || len(res.Frame) != 20 {
		t.Fatalf("multiRead of 1000 child lists: %v, too large %v, %d bytes", h.Err, res.TooLarge, len(res.Frame))
	}
	// The encoder's doublings come to twice the bound; one child list
	// per op read besides (the tree's strings are shared).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*zk.MaxReply {
		t.Errorf("multiRead allocated %d MiB to refuse, bound %d MiB", alloc>>20, zk.MaxReply>>20)
	}
	h, d, res := f.read(s, wire.OpGetChildren, &wire.PathWatchRequest{Path: "/m", Watch: true})
	var gc wire.GetChildrenResponse
	if h.Err != wire.OK || gc.Decode(d) != nil || len(gc.Children) != 19_000 || len(res.Watches) != 1 {
		t.Fatalf("getChildren that fits: %v, %d children, watches %v", h.Err, len(gc.Children), res.Watches)
	}
	few := make([]wire.MultiOp, 3)
	for i := range few {
		few[i] = wire.MultiOp{Type: wire.OpGetChildren, Path: "/m"}
	}
	var mr wire.MultiResponse
	if h, d, _ := f.read(s, wire.OpMultiRead, &wire.MultiRequest{Ops: few}); h.Err != wire.OK || mr.Decode(d) != nil || len(mr.Results) != 3 {
		t.Fatalf("multiRead that fits: %v, %d results", h.Err, len(mr.Results))
	}
	// One list that alone is larger than the bound: 800,000 bytes of
	// names under /big, 25 of them.
	f.create(s, "/big", nil)
	long := strings.Repeat("n", 700_000)
	for i := range 25 {
		f.create(s, "/big/"+long+strconv.Itoa(i), nil)
	}
	if h, _, res := f.read(s, wire.OpGetChildren2, &wire.PathWatchRequest{Path: "/big", Watch: true}); h.Err != wire.ErrMarshallingError || len(res.Watches) != 0 {
		t.Errorf("getChildren2 over the bound: %v, watches %v", h.Err, res.Watches)
	}
}
