package ensemble

// Watches obey READ permission: a session is not told of a change to a
// znode it may not read, whatever kind of watch it holds. The same cases
// run against coordrun (watcher and writer on different members) and
// against Apache ZooKeeper (Debian's 3.8.0 package, which carries the
// backported fix for CVE-2024-23944), where the one deliberate difference
// (setWatches) is asserted both ways.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
)

type watchACLEnv struct {
	watchAddr string // where the watching sessions connect
	writeAddr string // where the writer connects
	root      string
	zookeeper bool // the target is Apache ZooKeeper
}

func TestWatchACL(t *testing.T) {
	c := startCluster(t, 3)
	runWatchACL(t, &watchACLEnv{watchAddr: c.cfgs[0].ClientAddr, writeAddr: c.cfgs[1].ClientAddr, root: "/wacl"})
}

// TestWatchACLZooKeeper runs the cases against Apache ZooKeeper, skipping
// without java or its jar unless CI is set.
func TestWatchACLZooKeeper(t *testing.T) {
	srv, err := zookeeper.Start(zookeeper.Require(t), "coordrun-watchacl-zk-", client.FourLetter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ZooKeeper log:\n%s", srv.Log())
		}
	})
	// ruok is answered before sessions are.
	testkit.WaitFor(t, 30*time.Second, "ZooKeeper to grant a session", func() bool {
		c, ok := rawHandshake(t, srv.Addr, wire.ConnectRequest{Timeout: 6000, Passwd: make([]byte, 16)})
		c.nc.Close()
		return ok && c.resp.SessionID != 0
	})
	runWatchACL(t, &watchACLEnv{watchAddr: srv.Addr, writeAddr: srv.Addr, root: fmt.Sprintf("/wacl-%d", time.Now().UnixNano()), zookeeper: true})
}

var (
	ownerDigest = digestID("owner:secret")
	annDigest   = digestID("ann:secret")
	// ownerAndAnn: the owner may do everything, ann may read, nobody else
	// anything.
	ownerAndAnn = []wire.ACL{
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: ownerDigest}},
		{Perms: wire.PermRead, ID: wire.ID{Scheme: "digest", ID: annDigest}},
	}
)

// watchACLSessions: the writer (owner), eve who may read nothing
// restricted, and ann who may read what ownerAndAnn guards.
type watchACLSessions struct {
	owner, eve, ann *wclient
}

func runWatchACL(t *testing.T, e *watchACLEnv) {
	owner := dialW(t, e.writeAddr)
	waAuth(t, owner, "digest", "owner:secret")
	waOK(t, owner, wire.OpCreate, &wire.CreateRequest{Path: e.root, ACL: openACL})

	cases := []struct {
		name string
		f    func(t *testing.T, e *watchACLEnv, s watchACLSessions, p string)
	}{
		{"DataWatchSetByExists", watchACLData},
		{"ExistWatchOnCreate", watchACLCreate},
		{"DeleteUsesDeletedNodesACL", watchACLDelete},
		{"ChildWatchUsesParentsACL", watchACLChildren},
		{"DeniedAfterWatchSetAndConsumed", watchACLRevoked},
		{"PersistentWatch", watchACLPersistent},
		{"RecursiveWatch", watchACLRecursive},
		{"IPIdentity", watchACLIP},
		{"SetWatchesMissedChange", watchACLSetWatches},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := watchACLSessions{owner: owner, eve: dialW(t, e.watchAddr), ann: dialW(t, e.watchAddr)}
			waAuth(t, s.ann, "digest", "ann:secret")
			p := e.root + "/" + tc.name
			waOK(t, owner, wire.OpCreate, &wire.CreateRequest{Path: p, ACL: openACL})
			tc.f(t, e, s, p)
		})
	}
}

// ---- helpers over the raw recording client ----

func waAuth(t *testing.T, w *wclient, scheme, cred string) {
	t.Helper()
	if r := w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: scheme, Auth: []byte(cred)}); r.h.Err != wire.OK {
		t.Fatalf("auth %s: %v", scheme, r.h.Err)
	}
}

// waOK sends a request that must succeed, ignoring the reply body.
func waOK(t *testing.T, w *wclient, op int32, req wire.Record) {
	t.Helper()
	if r := w.call(op, req); r.h.Err != wire.OK {
		t.Fatalf("%s %+v: %v", wire.OpName(op), req, r.h.Err)
	}
}

func waCreate(t *testing.T, w *wclient, path string, acl []wire.ACL) {
	t.Helper()
	waOK(t, w, wire.OpCreate, &wire.CreateRequest{Path: path, ACL: acl})
}

func waSet(t *testing.T, w *wclient, path, data string) {
	t.Helper()
	waOK(t, w, wire.OpSetData, &wire.SetDataRequest{Path: path, Data: []byte(data), Version: -1})
}

func waSetACL(t *testing.T, w *wclient, path string, acl []wire.ACL) {
	t.Helper()
	waOK(t, w, wire.OpSetACL, &wire.SetACLRequest{Path: path, ACL: acl, Version: -1})
}

func waDelete(t *testing.T, w *wclient, path string) {
	t.Helper()
	waOK(t, w, wire.OpDelete, &wire.DeleteRequest{Path: path, Version: -1})
}

// waWatch sets a one-shot watch with a read; want is the read's expected
// outcome (exists sets a watch whether or not the node exists).
func waWatch(t *testing.T, w *wclient, op int32, path string, want wire.Code) {
	t.Helper()
	w.sync() // read what the writer wrote, whichever member it used
	if got := w.code(op, &wire.PathWatchRequest{Path: path, Watch: true}); got != want {
		t.Fatalf("%s %s with a watch: %v, want %v", wire.OpName(op), path, got, want)
	}
}

// waAddWatch adds a persistent watch once w's member has applied what the
// writer wrote, so that no earlier change fires it.
func waAddWatch(t *testing.T, w *wclient, path string, mode int32) {
	t.Helper()
	w.sync()
	w.addWatch(path, mode)
}

// waHasWatch reports whether w's session still holds a watch of the type
// (wire.WatcherData, WatcherChildren) on path, by checkWatches.
func waHasWatch(t *testing.T, w *wclient, path string, typ int32) bool {
	t.Helper()
	switch code := w.watches(wire.OpCheckWatches, path, typ); code {
	case wire.OK:
		return true
	case wire.ErrNoWatcher:
		return false
	default:
		t.Fatalf("checkWatches %s: %v", path, code)
		return false
	}
}

// ---- cases ----

// exists sets a data watch without any ACL check (as in ZooKeeper), so a
// session may watch a node it cannot read; it is not told of the change.
func watchACLData(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/secret"
	waCreate(t, s.owner, n, ownerAndAnn)
	waWatch(t, s.eve, wire.OpExists, n, wire.OK)
	waWatch(t, s.eve, wire.OpGetData, n, wire.ErrNoAuth) // no watch from a refused read
	waWatch(t, s.ann, wire.OpGetData, n, wire.OK)
	waSet(t, s.owner, n, "changed")
	s.eve.expectEvents("eve, without READ")
	s.ann.expectEvents("ann, with READ", ev(wire.EventNodeDataChanged, n))
}

// A watch for a node's creation: the new node's ACL decides.
func watchACLCreate(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/new"
	waWatch(t, s.eve, wire.OpExists, n, wire.ErrNoNode)
	waWatch(t, s.ann, wire.OpExists, n, wire.ErrNoNode)
	waCreate(t, s.owner, n, ownerAndAnn)
	s.eve.expectEvents("eve, without READ on the new node")
	s.ann.expectEvents("ann", ev(wire.EventNodeCreated, n))
	// Consumed though not delivered: deleting and re-creating the node
	// open to all does not fire it.
	waDelete(t, s.owner, n)
	waCreate(t, s.owner, n, openACL)
	s.eve.expectEvents("eve, after the re-create")
}

// A deletion: the deleted node's last ACL decides, for data and child
// watches on it alike; the parent's child-list change is the parent's.
func watchACLDelete(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/gone"
	waCreate(t, s.owner, n, ownerAndAnn)
	waWatch(t, s.eve, wire.OpExists, n, wire.OK)
	waWatch(t, s.eve, wire.OpGetChildren, p, wire.OK) // the parent is open
	waWatch(t, s.ann, wire.OpExists, n, wire.OK)
	waWatch(t, s.ann, wire.OpGetChildren, n, wire.OK)
	waDelete(t, s.owner, n)
	s.eve.expectEvents("eve", ev(wire.EventNodeChildrenChanged, p))
	s.ann.expectEvents("ann", ev(wire.EventNodeDeleted, n))
}

// A child-list change is gated by the parent's ACL, as it stands when the
// change is made: here it was tightened after the watches were set.
func watchACLChildren(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/kids"
	waCreate(t, s.owner, n, openACL)
	waWatch(t, s.eve, wire.OpGetChildren, n, wire.OK)
	waWatch(t, s.ann, wire.OpGetChildren, n, wire.OK)
	waSetACL(t, s.owner, n, ownerAndAnn)
	waCreate(t, s.owner, n+"/c", openACL) // the child itself is open
	s.eve.expectEvents("eve, after the parent was closed to her")
	s.ann.expectEvents("ann", ev(wire.EventNodeChildrenChanged, n))
}

// READ taken away after the watch was set: no notification, and the
// one-shot watch is used up, so giving READ back does not revive it.
func watchACLRevoked(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/flip"
	waCreate(t, s.owner, n, openACL)
	waWatch(t, s.eve, wire.OpGetData, n, wire.OK)
	waWatch(t, s.ann, wire.OpGetData, n, wire.OK)
	waSetACL(t, s.owner, n, ownerAndAnn)
	waSet(t, s.owner, n, "while closed")
	s.eve.expectEvents("eve, READ revoked")
	s.ann.expectEvents("ann", ev(wire.EventNodeDataChanged, n))
	if waHasWatch(t, s.eve, n, wire.WatcherData) {
		t.Error("eve's suppressed one-shot watch is still registered")
	}
	waSetACL(t, s.owner, n, openACL)
	waSet(t, s.owner, n, "open again")
	s.eve.expectEvents("eve, READ given back")
}

// A persistent watch is checked per event and stays: data changes and
// child-list changes of a node eve cannot read are not told, and once the
// node is opened to her they are.
func watchACLPersistent(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n := p + "/pw"
	waCreate(t, s.owner, n, ownerAndAnn)
	waAddWatch(t, s.eve, n, wire.AddWatchPersistent) // addWatch checks no ACL
	waAddWatch(t, s.ann, n, wire.AddWatchPersistent)
	waSet(t, s.owner, n, "x")
	waCreate(t, s.owner, n+"/c", openACL)
	waDelete(t, s.owner, n+"/c")
	s.eve.expectEvents("eve, node closed to her")
	s.ann.expectEvents("ann", ev(wire.EventNodeDataChanged, n), ev(wire.EventNodeChildrenChanged, n), ev(wire.EventNodeChildrenChanged, n))
	waSetACL(t, s.owner, n, openACL)
	waSet(t, s.owner, n, "y")
	waDelete(t, s.owner, n)
	s.eve.expectEvents("eve, node opened", ev(wire.EventNodeDataChanged, n), ev(wire.EventNodeDeleted, n))
}

// The CVE-2024-23944 case: a recursive watch on an open node must not
// reveal the paths of descendants the session may not read.
func watchACLRecursive(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	waAddWatch(t, s.eve, p, wire.AddWatchPersistentRecursive)
	waAddWatch(t, s.ann, p, wire.AddWatchPersistentRecursive)
	secret, open := p+"/alice-payroll", p+"/public"
	waCreate(t, s.owner, secret, ownerAndAnn)
	waCreate(t, s.owner, open, openACL)
	waCreate(t, s.owner, open+"/deep-secret", ownerAndAnn)
	waSet(t, s.owner, secret, "x")
	waSet(t, s.owner, open, "y")
	waDelete(t, s.owner, open+"/deep-secret")
	waDelete(t, s.owner, secret)
	s.eve.expectEvents("eve",
		ev(wire.EventNodeCreated, open),
		ev(wire.EventNodeDataChanged, open),
	)
	s.ann.expectEvents("ann",
		ev(wire.EventNodeCreated, secret),
		ev(wire.EventNodeCreated, open),
		ev(wire.EventNodeCreated, open+"/deep-secret"),
		ev(wire.EventNodeDataChanged, secret),
		ev(wire.EventNodeDataChanged, open),
		ev(wire.EventNodeDeleted, open+"/deep-secret"),
		ev(wire.EventNodeDeleted, secret),
	)
}

// The ip scheme matches the connection's remote address (loopback here).
func watchACLIP(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	mine, other := p+"/loopback", p+"/elsewhere"
	owner := wire.ACL{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: ownerDigest}}
	waCreate(t, s.owner, mine, []wire.ACL{owner, {Perms: wire.PermRead, ID: wire.ID{Scheme: "ip", ID: "127.0.0.0/8"}}})
	waCreate(t, s.owner, other, []wire.ACL{owner, {Perms: wire.PermRead, ID: wire.ID{Scheme: "ip", ID: "10.1.2.3"}}})
	waWatch(t, s.eve, wire.OpGetData, mine, wire.OK)
	waWatch(t, s.eve, wire.OpExists, other, wire.OK)
	waSet(t, s.owner, mine, "x")
	waSet(t, s.owner, other, "x")
	s.eve.expectEvents("eve on loopback", ev(wire.EventNodeDataChanged, mine))
}

// setWatches after a reconnect fires at once for a change the client
// missed. coordrun checks READ there too; ZooKeeper (3.8.4, 3.9.2 and the
// Debian backport alike) delivers these events without a check.
func watchACLSetWatches(t *testing.T, e *watchACLEnv, s watchACLSessions, p string) {
	n, kids := p+"/missed", p+"/missed-kids"
	waCreate(t, s.owner, n, ownerAndAnn)
	waCreate(t, s.owner, kids, ownerAndAnn)
	s.eve.sync()
	rel := s.eve.lastZxid.Load()
	waSet(t, s.owner, n, "missed")
	waCreate(t, s.owner, kids+"/c", openACL)
	s.eve.sync() // this member has applied the changes
	s.ann.sync()
	sw := &wire.SetWatches2{
		RelativeZxid:               rel,
		DataWatches:                []string{n},
		ExistWatches:               []string{},
		ChildWatches:               []string{kids},
		PersistentWatches:          []string{},
		PersistentRecursiveWatches: []string{},
	}
	for _, w := range []*wclient{s.eve, s.ann} {
		if r := w.callXid(wire.XidSetWatches, wire.OpSetWatches2, sw); r.h.Err != wire.OK {
			t.Fatalf("setWatches2: %v", r.h.Err)
		}
	}
	missed := []wire.WatcherEvent{ev(wire.EventNodeDataChanged, n), ev(wire.EventNodeChildrenChanged, kids)}
	s.ann.expectEvents("ann", missed...)
	if e.zookeeper {
		s.eve.expectEvents("eve on ZooKeeper (no ACL check on setWatches)", missed...)
		return
	}
	s.eve.expectEvents("eve")
	// Used up, as a suppressed one-shot watch is.
	if waHasWatch(t, s.eve, n, wire.WatcherData) || waHasWatch(t, s.eve, kids, wire.WatcherChildren) {
		t.Error("eve's suppressed setWatches watches are registered")
	}
	if !slices.Equal(s.eve.takeEvents(), nil) {
		t.Error("events after the check")
	}
}
