package ensemble

// Conformance suite: ZooKeeper 3.8 client-visible behaviour, exercised with
// go-zookeeper (a client nobody here wrote) and, where go-zookeeper cannot
// express a case or validates it away on the client, with raw frames built
// with ensemble/wire. Every scenario runs against a 1-member and a 3-member
// ensemble; in the 3-member one the clients of a scenario sit on different
// members, so follower forwarding, liveness relaying and cross-member
// watch ordering are exercised.
//
// Expected behaviour follows Apache ZooKeeper 3.8 (checked against its
// sources and a real 3.8 server): e.g. the client-visible cversion is
// 2*creates-numChildren (DataNode.copyStat), so deleting a child raises it,
// and a container's ephemeralOwner reads as 0.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

type confCase struct {
	name string
	f    func(t *testing.T, e *confEnv)
}

var confCases = []confCase{
	{"StatLifecycle", confStatLifecycle},
	{"Create2AndGetChildrenRaw", confCreate2Raw},
	{"Containers", confContainers},
	{"ChildrenAndExists", confChildren},
	{"Sync", confSync},
	{"Sequential", confSequential},
	{"SequentialConcurrent", confSequentialConcurrent},
	{"EphemeralNoChildren", confEphemeralNoChildren},
	{"EphemeralGoneOnClose", confEphemeralGoneOnClose},
	{"EphemeralGoneOnExpiry", confEphemeralGoneOnExpiry},
	{"EphemeralGoneAfterSocketClose", confEphemeralGoneAfterSocketClose},
	{"CloseSessionRaw", confCloseSessionRaw},
	{"SessionPassword", confSessionPassword},
	{"SessionTimeoutNegotiation", confTimeoutNegotiation},
	{"DataWatch", confDataWatch},
	{"ExistsWatchOnMissingNode", confExistsWatch},
	{"ChildWatch", confChildWatch},
	{"WatchOneShot", confWatchOneShot},
	{"WatchOrdering", confWatchOrdering},
	{"DeleteNotifiesEachClientOnce", confDeleteNotifies},
	{"ConditionalVersions", confVersions},
	{"MultiAtomic", confMultiAtomic},
	{"MultiApplied", confMultiApplied},
	{"ACLWorld", confACLWorld},
	{"ACLDigest", confACLDigest},
	{"ACLDigestRedacted", confACLRedacted},
	{"ACLAuthScheme", confACLAuth},
	{"ACLIP", confACLIP},
	{"ACLInvalid", confACLInvalid},
	{"Errors", confErrors},
	{"BadPathsClient", confBadPathsClient},
	{"BadPathsServer", confBadPathsServer},
	{"DataTooLarge", confDataTooLarge},
	{"SystemNodes", confSystemNodes},
	{"UnknownOpcode", confUnknownOpcode},
	{"BadInput", confBadInput},
	{"FourLetterWords", confFourLetterWords},
}

func TestConformance(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
			// Raft timeouts well above the harness's 300ms: the suite must
			// not see leader changes when a busy 2-core machine stalls it.
			e := &confEnv{c: startCluster(t, n, func(c *Config) {
				c.HeartbeatTimeout = time.Second
				c.ElectionTimeout = time.Second
				// The suite reads mntr and conf besides the default words.
				c.FourLetterWords = []string{"*"}
			}), n: n}
			t.Run("ops", func(t *testing.T) {
				for _, tc := range confCases {
					t.Run(tc.name, func(t *testing.T) {
						t.Parallel()
						tc.f(t, e)
					})
				}
			})
			if n == 3 {
				// Stops a member, so it runs alone after the others.
				t.Run("SessionSurvivesMemberLoss", func(t *testing.T) { confFailover(t, e) })
			}
		})
	}
}

func eq[T comparable](t testing.TB, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func statFromWire(s wire.Stat) zk.Stat {
	return zk.Stat{
		Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime,
		Version: s.Version, Cversion: s.Cversion, Aversion: s.Aversion,
		EphemeralOwner: s.EphemeralOwner, DataLength: s.DataLength,
		NumChildren: s.NumChildren, Pzxid: s.Pzxid,
	}
}

// ---- basic operations and Stat ----

func confStatLifecycle(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	const p = "/stat"
	before := time.Now().UnixMilli()
	mustCreate(t, a, p, []byte("abc"), 0)
	after := time.Now().UnixMilli()

	st := mustStat(t, a, p)
	if st.Czxid <= 0 {
		t.Errorf("czxid %d, want > 0", st.Czxid)
	}
	eq(t, "new node mzxid", st.Mzxid, st.Czxid)
	eq(t, "new node pzxid", st.Pzxid, st.Czxid)
	eq(t, "new node mtime", st.Mtime, st.Ctime)
	if st.Ctime < before-5000 || st.Ctime > after+5000 {
		t.Errorf("ctime %d not within 5s of the create [%d, %d]", st.Ctime, before, after)
	}
	eq(t, "new node version", st.Version, int32(0))
	eq(t, "new node cversion", st.Cversion, int32(0))
	eq(t, "new node aversion", st.Aversion, int32(0))
	eq(t, "new node ephemeralOwner", st.EphemeralOwner, int64(0))
	eq(t, "new node dataLength", st.DataLength, int32(3))
	eq(t, "new node numChildren", st.NumChildren, int32(0))

	// Another member serves the same stat (after sync), through get,
	// exists and getChildren2 alike.
	syncRead(t, b, p)
	data, gst, err := b.Get(p)
	must(t, "get", err)
	eq(t, "get data", string(data), "abc")
	eq(t, "get stat", *gst, *st)
	_, cst, err := b.Children(p)
	must(t, "children", err)
	eq(t, "children2 stat", *cst, *st)

	// Creating a child: parent's cversion, numChildren and pzxid move;
	// its data fields do not.
	mustCreate(t, a, p+"/c1", nil, 0)
	child := mustStat(t, a, p+"/c1")
	eq(t, "nil-data child dataLength", child.DataLength, int32(0))
	ps := mustStat(t, a, p)
	eq(t, "parent cversion after child create", ps.Cversion, int32(1))
	eq(t, "parent numChildren after child create", ps.NumChildren, int32(1))
	eq(t, "parent pzxid after child create", ps.Pzxid, child.Czxid)
	eq(t, "parent mzxid after child create", ps.Mzxid, st.Mzxid)
	eq(t, "parent version after child create", ps.Version, int32(0))
	if child.Czxid <= st.Czxid {
		t.Errorf("child czxid %d not after parent's %d", child.Czxid, st.Czxid)
	}

	// setData: version and mzxid/mtime move, nothing else.
	set, err := a.Set(p, []byte("defg"), 0)
	must(t, "set", err)
	eq(t, "set version", set.Version, int32(1))
	if set.Mzxid <= child.Czxid {
		t.Errorf("mzxid after set %d, want > %d", set.Mzxid, child.Czxid)
	}
	if set.Mtime < st.Mtime {
		t.Errorf("mtime went back: %d < %d", set.Mtime, st.Mtime)
	}
	eq(t, "set czxid", set.Czxid, st.Czxid)
	eq(t, "set ctime", set.Ctime, st.Ctime)
	eq(t, "set dataLength", set.DataLength, int32(4))
	eq(t, "set cversion", set.Cversion, int32(1))
	eq(t, "set numChildren", set.NumChildren, int32(1))
	eq(t, "set pzxid", set.Pzxid, ps.Pzxid)
	eq(t, "set aversion", set.Aversion, int32(0))
	eq(t, "stat after set", *mustStat(t, a, p), *set)

	// setACL: aversion moves, mzxid does not.
	ast, err := a.SetACL(p, zk.WorldACL(zk.PermAll), 0)
	must(t, "setACL", err)
	eq(t, "setACL aversion", ast.Aversion, int32(1))
	eq(t, "setACL version", ast.Version, int32(1))
	eq(t, "setACL mzxid", ast.Mzxid, set.Mzxid)
	eq(t, "setACL mtime", ast.Mtime, set.Mtime)
	acl, gast, err := a.GetACL(p)
	must(t, "getACL", err)
	if !slices.Equal(acl, zk.WorldACL(zk.PermAll)) {
		t.Errorf("getACL = %v", acl)
	}
	eq(t, "getACL stat", *gast, *ast)

	// Deleting the child: numChildren drops and pzxid moves. ZooKeeper
	// reports cversion as 2*creates-numChildren, so a delete raises it too.
	must(t, "delete child", a.Delete(p+"/c1", 0))
	ds := mustStat(t, a, p)
	eq(t, "parent numChildren after child delete", ds.NumChildren, int32(0))
	if ds.Pzxid <= ps.Pzxid {
		t.Errorf("parent pzxid after child delete %d, want > %d", ds.Pzxid, ps.Pzxid)
	}
	eq(t, "parent cversion after child create+delete", ds.Cversion, int32(2))
	eq(t, "parent mzxid after child delete", ds.Mzxid, set.Mzxid)
	eq(t, "parent version after child delete", ds.Version, int32(1))

	// An ephemeral's owner is the creating session, seen from anywhere.
	mustCreate(t, a, p+"/e", nil, zk.FlagEphemeral)
	syncRead(t, b, p)
	es := mustStat(t, b, p+"/e")
	eq(t, "ephemeralOwner", es.EphemeralOwner, a.SessionID())
}

func confCreate2Raw(t *testing.T, e *confEnv) {
	rc := rawSession(t, e.addr(1), confSessionTimeout)
	var cr wire.Create2Response
	code := rc.call(wire.OpCreate2, &wire.CreateRequest{Path: "/create2", Data: []byte("xy"), ACL: openACL}, &cr)
	if code != wire.OK {
		t.Fatalf("create2: %v", code)
	}
	eq(t, "create2 path", cr.Path, "/create2")
	s := cr.Stat
	if s.Czxid <= 0 {
		t.Errorf("create2 czxid %d", s.Czxid)
	}
	eq(t, "create2 mzxid", s.Mzxid, s.Czxid)
	eq(t, "create2 pzxid", s.Pzxid, s.Czxid)
	eq(t, "create2 version", s.Version, int32(0))
	eq(t, "create2 dataLength", s.DataLength, int32(2))
	eq(t, "create2 numChildren", s.NumChildren, int32(0))
	eq(t, "create2 ephemeralOwner", s.EphemeralOwner, int64(0))

	// The stat in the reply is the node's stat, as any member reports it.
	a := e.client(t, 0)
	syncRead(t, a, "/create2")
	eq(t, "stat after create2", *mustStat(t, a, "/create2"), statFromWire(s))

	var cr2 wire.Create2Response
	code = rc.call(wire.OpCreate2, &wire.CreateRequest{Path: "/create2/s-", ACL: openACL, Flags: wire.FlagEphemeralSequential}, &cr2)
	if code != wire.OK {
		t.Fatalf("create2 ephemeral sequential: %v", code)
	}
	eq(t, "create2 sequential path", cr2.Path, "/create2/s-0000000000")
	eq(t, "create2 ephemeralOwner", cr2.Stat.EphemeralOwner, rc.resp.SessionID)

	// Plain create (opcode 1) answers with the path only.
	var c1 wire.CreateResponse
	if code := rc.call(wire.OpCreate, &wire.CreateRequest{Path: "/create2/p", ACL: openACL}, &c1); code != wire.OK {
		t.Fatalf("create: %v", code)
	}
	eq(t, "create path", c1.Path, "/create2/p")

	// getChildren (opcode 8) and getChildren2 (12).
	var gc wire.GetChildrenResponse
	if code := rc.call(wire.OpGetChildren, &wire.PathWatchRequest{Path: "/create2"}, &gc); code != wire.OK {
		t.Fatalf("getChildren: %v", code)
	}
	if got := sortedCopy(gc.Children); !slices.Equal(got, []string{"p", "s-0000000000"}) {
		t.Errorf("getChildren = %v", got)
	}
	var gc2 wire.GetChildren2Response
	if code := rc.call(wire.OpGetChildren2, &wire.PathWatchRequest{Path: "/create2"}, &gc2); code != wire.OK {
		t.Fatalf("getChildren2: %v", code)
	}
	eq(t, "getChildren2 numChildren", gc2.Stat.NumChildren, int32(2))
	eq(t, "getChildren2 cversion", gc2.Stat.Cversion, int32(2))
	if code := rc.call(wire.OpGetChildren, &wire.PathWatchRequest{Path: "/create2/none"}, nil); code != wire.ErrNoNode {
		t.Errorf("getChildren of a missing node: %v, want %v", code, wire.ErrNoNode)
	}
	if code := rc.call(wire.OpExists, &wire.PathWatchRequest{Path: "/create2/none"}, nil); code != wire.ErrNoNode {
		t.Errorf("exists of a missing node: %v, want %v", code, wire.ErrNoNode)
	}
}

func confContainers(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	p, err := a.CreateContainer("/ctr", []byte("c"), zk.FlagContainer, zk.WorldACL(zk.PermAll))
	must(t, "createContainer", err)
	eq(t, "container path", p, "/ctr")
	st := mustStat(t, a, "/ctr")
	// ZooKeeper stores Long.MIN_VALUE as a container's owner but shows
	// clients 0 (DataNode.getClientEphemeralOwner).
	eq(t, "container ephemeralOwner", st.EphemeralOwner, int64(0))
	eq(t, "container dataLength", st.DataLength, int32(1))

	// A container may have children; once the last one goes, the
	// container itself is removed (by ZooKeeper's container manager).
	mustCreate(t, a, "/ctr/x", nil, 0)
	syncRead(t, b, "/ctr")
	ok, _, ch, err := b.ExistsW("/ctr")
	if err != nil || !ok {
		t.Fatalf("existsW /ctr: %v %v", ok, err)
	}
	must(t, "delete last child", a.Delete("/ctr/x", -1))
	waitEvent(t, ch, zk.EventNodeDeleted, "/ctr")
	mustExist(t, b, "/ctr", false)
}

func confChildren(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	mustCreate(t, a, "/kids", nil, 0)
	for _, k := range []string{"c", "a", "b"} {
		mustCreate(t, a, "/kids/"+k, nil, 0)
	}
	syncRead(t, b, "/kids")
	kids, st, err := b.Children("/kids")
	must(t, "children", err)
	if got := sortedCopy(kids); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("children = %v", kids)
	}
	eq(t, "numChildren", st.NumChildren, int32(3))
	leaf, _, err := b.Children("/kids/a")
	must(t, "children of a leaf", err)
	eq(t, "children of a leaf", len(leaf), 0)
	ok, est, err := b.Exists("/kids/a")
	if err != nil || !ok || est.Czxid == 0 {
		t.Errorf("exists /kids/a: %v %+v %v", ok, est, err)
	}
	ok, _, err = b.Exists("/kids/none")
	if err != nil || ok {
		t.Errorf("exists of a missing node: %v %v", ok, err)
	}
}

func confSync(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	mustCreate(t, a, "/sync", nil, 0)
	for i := 0; i < 5; i++ {
		p := fmt.Sprintf("/sync/n%d", i)
		mustCreate(t, a, p, []byte(p), 0)
		got, err := b.Sync("/sync")
		must(t, "sync", err)
		eq(t, "sync path", got, "/sync")
		// After sync, b's member has applied everything a had
		// acknowledged when the sync began.
		data, _, err := b.Get(p)
		if err != nil || string(data) != p {
			t.Fatalf("get %s after sync: %q %v", p, data, err)
		}
	}
}

func confSequential(t *testing.T, e *confEnv) {
	a := e.client(t, 0)
	mustCreate(t, a, "/seq", nil, 0)
	creates := 0 // child creations under /seq so far: the next suffix
	seqRE := regexp.MustCompile(`^/seq/n-[0-9]{10}$`)
	create := func(prefix string, flags int32) string {
		t.Helper()
		want := fmt.Sprintf("%s%010d", prefix, creates)
		got := mustCreate(t, a, prefix, nil, flags)
		creates++
		if got != want {
			t.Errorf("create %s (flags %d) = %s, want %s", prefix, flags, got, want)
		}
		return got
	}
	n0 := create("/seq/n-", zk.FlagSequence)
	eq(t, "first sequential name", n0, "/seq/n-0000000000")
	mustCreate(t, a, "/seq/plain", nil, 0)
	creates++
	n1 := create("/seq/n-", zk.FlagSequence)
	// Deleting children does not make numbers reusable: they keep rising.
	must(t, "delete", a.Delete("/seq/plain", -1))
	must(t, "delete", a.Delete(n0, -1))
	n2 := create("/seq/n-", zk.FlagSequence)
	for _, p := range []string{n0, n1, n2} {
		if !seqRE.MatchString(p) {
			t.Errorf("sequential name %q is not prefix + 10 digits", p)
		}
	}
	if !(n0 < n1 && n1 < n2) {
		t.Errorf("sequence not rising: %s %s %s", n0, n1, n2)
	}
	es := create("/seq/e-", zk.FlagEphemeralSequential)
	st := mustStat(t, a, es)
	eq(t, "ephemeral sequential owner", st.EphemeralOwner, a.SessionID())
	// A sequential create may end in "/": the name is the number alone.
	create("/seq/", zk.FlagSequence)
}

func confSequentialConcurrent(t *testing.T, e *confEnv) {
	clients := []*zk.Conn{e.client(t, 0), e.client(t, 1), e.client(t, 2)}
	mustCreate(t, clients[0], "/seqc", nil, 0)
	const per = 10
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)*per)
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				p, err := c.Create("/seqc/n-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[p] {
					errs <- fmt.Errorf("sequential name %s handed out twice", p)
				}
				seen[p] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Numbers 0..29, each once.
	for i := 0; i < len(clients)*per; i++ {
		if p := fmt.Sprintf("/seqc/n-%010d", i); !seen[p] {
			t.Errorf("%s missing; got %v", p, seen)
		}
	}
}

// ---- ephemerals and sessions ----

func confEphemeralNoChildren(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	mustCreate(t, a, "/ephc", nil, 0)
	mustCreate(t, a, "/ephc/e", nil, zk.FlagEphemeral)
	_, err := a.Create("/ephc/e/x", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "child of own ephemeral", err, zk.ErrNoChildrenForEphemerals)
	_, err = a.Create("/ephc/e/s-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	wantErr(t, "ephemeral sequential child of ephemeral", err, zk.ErrNoChildrenForEphemerals)
	syncRead(t, b, "/ephc")
	_, err = b.Create("/ephc/e/y", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "child of another session's ephemeral", err, zk.ErrNoChildrenForEphemerals)
	st := mustStat(t, b, "/ephc/e")
	eq(t, "ephemeral numChildren", st.NumChildren, int32(0))
}

func confEphemeralGoneOnClose(t *testing.T, e *confEnv) {
	owner, obs := e.client(t, 0), e.client(t, 1)
	mustCreate(t, owner, "/ephclose", nil, 0)
	mustCreate(t, owner, "/ephclose/e", []byte("x"), zk.FlagEphemeral)
	s := mustCreate(t, owner, "/ephclose/s-", nil, zk.FlagEphemeralSequential)
	syncRead(t, obs, "/ephclose")
	ok, _, dch, err := obs.ExistsW("/ephclose/e")
	if err != nil || !ok {
		t.Fatalf("existsW: %v %v", ok, err)
	}
	_, _, sch, err := obs.GetW(s)
	must(t, "getW", err)
	kids, _, cch, err := obs.ChildrenW("/ephclose")
	must(t, "childrenW", err)
	eq(t, "children before close", len(kids), 2)

	owner.Close()
	waitEvent(t, dch, zk.EventNodeDeleted, "/ephclose/e")
	waitEvent(t, sch, zk.EventNodeDeleted, s)
	waitEvent(t, cch, zk.EventNodeChildrenChanged, "/ephclose")
	mustExist(t, obs, "/ephclose/e", false)
	mustExist(t, obs, s, false)
	kids, _, err = obs.Children("/ephclose")
	must(t, "children", err)
	eq(t, "children after close", len(kids), 0)
}

// createRawEphemeral creates an ephemeral over a raw session.
func createRawEphemeral(t *testing.T, rc *rawClient, path string) {
	t.Helper()
	var cr wire.CreateResponse
	if code := rc.call(wire.OpCreate, &wire.CreateRequest{Path: path, ACL: openACL, Flags: wire.FlagEphemeral}, &cr); code != wire.OK {
		t.Fatalf("raw create %s: %v", path, code)
	}
}

// waitGone waits (with a watch from obs) until path is deleted, and returns
// how long after since that was seen.
func waitGone(t *testing.T, obs *zk.Conn, path string, since time.Time) time.Duration {
	t.Helper()
	parent := path[:strings.LastIndexByte(path, '/')]
	syncRead(t, obs, parent)
	ok, _, ch, err := obs.ExistsW(path)
	must(t, "existsW", err)
	if ok {
		waitEvent(t, ch, zk.EventNodeDeleted, path)
	}
	return time.Since(since)
}

func confEphemeralGoneOnExpiry(t *testing.T, e *confEnv) {
	obs := e.client(t, 1)
	mustCreate(t, obs, "/ephexp", nil, 0)
	syncRead(t, obs, "/ephexp")
	rc := rawSession(t, e.addr(0), 500*time.Millisecond)
	timeout := time.Duration(rc.resp.Timeout) * time.Millisecond
	createRawEphemeral(t, rc, "/ephexp/silent")
	created := time.Now()
	// The owner now says nothing more but keeps its socket open.
	took := waitGone(t, obs, "/ephexp/silent", created)
	if took < timeout/2 {
		t.Errorf("ephemeral removed %v after the owner's last packet; its session timeout is %v", took, timeout)
	}
	// The server also drops the silent connection.
	expectClosed(t, rc.nc, "connection of an expired session")
	// The session is gone for good: resuming it is refused as expired.
	testkit.WaitFor(t, 10*time.Second, "an answer to resuming the expired session", func() bool {
		c, ok := rawHandshake(t, e.addr(1), wire.ConnectRequest{LastZxidSeen: rc.lastZxid, Timeout: 4000,
			SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
		if !ok {
			return false
		}
		eq(t, "resumed expired session id", c.resp.SessionID, int64(0))
		eq(t, "resumed expired session timeout", c.resp.Timeout, int32(0))
		return true
	})
}

func confEphemeralGoneAfterSocketClose(t *testing.T, e *confEnv) {
	obs := e.client(t, 0)
	mustCreate(t, obs, "/ephsock", nil, 0)
	rc := rawSession(t, e.addr(1), 500*time.Millisecond)
	timeout := time.Duration(rc.resp.Timeout) * time.Millisecond
	createRawEphemeral(t, rc, "/ephsock/e")
	created := time.Now()
	rc.nc.Close() // no closeSession: the session must time out
	took := waitGone(t, obs, "/ephsock/e", created)
	if took < timeout/2 {
		t.Errorf("ephemeral removed %v after its owner vanished; its session timeout is %v", took, timeout)
	}
}

func confCloseSessionRaw(t *testing.T, e *confEnv) {
	obs := e.client(t, 1)
	mustCreate(t, obs, "/closeraw", nil, 0)
	rc := rawSession(t, e.addr(0), confSessionTimeout)
	createRawEphemeral(t, rc, "/closeraw/e")
	if code := rc.call(wire.OpCloseSession, nil, nil); code != wire.OK {
		t.Fatalf("closeSession: %v", code)
	}
	expectClosed(t, rc.nc, "connection after closeSession")
	// The close was committed before its reply: after a sync any member
	// shows the ephemeral gone.
	syncRead(t, obs, "/closeraw")
	mustExist(t, obs, "/closeraw/e", false)
	// Resuming a closed session is answered with a zero session id and
	// timeout, then the connection is closed.
	testkit.WaitFor(t, 10*time.Second, "an answer to resuming the closed session", func() bool {
		c, ok := rawHandshake(t, e.addr(1), wire.ConnectRequest{LastZxidSeen: rc.lastZxid, Timeout: 4000,
			SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
		if !ok {
			return false // that member is behind the client: ZooKeeper refuses, try again
		}
		eq(t, "resumed closed session id", c.resp.SessionID, int64(0))
		eq(t, "resumed closed session timeout", c.resp.Timeout, int32(0))
		expectClosed(t, c.nc, "connection resuming a closed session")
		return true
	})
}

func confSessionPassword(t *testing.T, e *confEnv) {
	obs := e.client(t, 2)
	mustCreate(t, obs, "/sesspw", nil, 0)
	rc := rawSession(t, e.addr(0), confSessionTimeout)
	createRawEphemeral(t, rc, "/sesspw/e")
	bad := slices.Clone(rc.resp.Passwd)
	bad[0] ^= 0xff
	testkit.WaitFor(t, 10*time.Second, "an answer to a wrong password", func() bool {
		c, ok := rawHandshake(t, e.addr(1), wire.ConnectRequest{LastZxidSeen: rc.lastZxid, Timeout: 4000,
			SessionID: rc.resp.SessionID, Passwd: bad})
		if !ok {
			return false
		}
		eq(t, "session id for a wrong password", c.resp.SessionID, int64(0))
		eq(t, "timeout for a wrong password", c.resp.Timeout, int32(0))
		expectClosed(t, c.nc, "connection with a wrong password")
		return true
	})
	// A wrong password harms nothing: the session lives on.
	rc.ping()
	syncRead(t, obs, "/sesspw")
	mustExist(t, obs, "/sesspw/e", true)

	// The right password resumes it, on any member.
	var c *rawClient
	testkit.WaitFor(t, 10*time.Second, "resuming with the right password", func() bool {
		var ok bool
		c, ok = rawHandshake(t, e.addr(2), wire.ConnectRequest{LastZxidSeen: rc.lastZxid, Timeout: 4000,
			SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
		return ok
	})
	eq(t, "resumed session id", c.resp.SessionID, rc.resp.SessionID)
	if c.resp.Timeout <= 0 {
		t.Fatalf("resumed session timeout %d", c.resp.Timeout)
	}
	if e.n == 1 {
		// On the same server the session's old connection is closed.
		expectClosed(t, rc.nc, "old connection of a resumed session")
	}
	c.ping()
	var est wire.Stat
	if code := c.call(wire.OpExists, &wire.PathWatchRequest{Path: "/sesspw/e"}, &est); code != wire.OK {
		t.Fatalf("exists over the resumed session: %v", code)
	}
	eq(t, "ephemeral owner after resume", est.EphemeralOwner, rc.resp.SessionID)
	if code := c.call(wire.OpCloseSession, nil, nil); code != wire.OK {
		t.Fatalf("closeSession: %v", code)
	}
}

func confTimeoutNegotiation(t *testing.T, e *confEnv) {
	min := e.c.cfgs[0].MinSessionTimeout
	max := e.c.cfgs[0].MaxSessionTimeout
	if max == 0 {
		max = defaultMaxSessionTimeout
	}
	for _, tc := range []struct{ ask, want time.Duration }{
		{time.Millisecond, min},                          // raised to the minimum
		{3 * time.Second, 3 * time.Second},               // granted
		{time.Duration(1<<31-1) * time.Millisecond, max}, // lowered to the maximum
	} {
		rc := rawSession(t, e.addr(2), tc.ask)
		eq(t, fmt.Sprintf("timeout granted for %v", tc.ask), time.Duration(rc.resp.Timeout)*time.Millisecond, tc.want)
		if code := rc.call(wire.OpCloseSession, nil, nil); code != wire.OK {
			t.Fatalf("closeSession: %v", code)
		}
	}
}

// ---- watches ----

func confDataWatch(t *testing.T, e *confEnv) {
	w, wr := e.client(t, 1), e.client(t, 0)
	const p = "/wdata"
	mustCreate(t, wr, p, []byte("0"), 0)
	syncRead(t, w, p)
	data, _, ch, err := w.GetW(p)
	must(t, "getW", err)
	eq(t, "data", string(data), "0")
	_, err = wr.Set(p, []byte("1"), -1)
	must(t, "set", err)
	waitEvent(t, ch, zk.EventNodeDataChanged, p)
	data, _, err = w.Get(p)
	must(t, "get", err)
	eq(t, "data after the event", string(data), "1")

	// exists on an existing node watches its data, and its deletion.
	ok, _, ch, err := w.ExistsW(p)
	if err != nil || !ok {
		t.Fatalf("existsW: %v %v", ok, err)
	}
	_, err = wr.Set(p, []byte("2"), -1)
	must(t, "set", err)
	waitEvent(t, ch, zk.EventNodeDataChanged, p)
	_, _, ch, err = w.ExistsW(p)
	must(t, "existsW", err)
	must(t, "delete", wr.Delete(p, -1))
	waitEvent(t, ch, zk.EventNodeDeleted, p)
	mustExist(t, w, p, false)
}

func confExistsWatch(t *testing.T, e *confEnv) {
	w, wr := e.client(t, 1), e.client(t, 0)
	const p = "/wexist"
	ok, _, ch, err := w.ExistsW(p)
	if err != nil || ok {
		t.Fatalf("existsW on a missing node: %v %v", ok, err)
	}
	mustCreate(t, wr, p, []byte("here"), 0)
	waitEvent(t, ch, zk.EventNodeCreated, p)
	data, _, err := w.Get(p)
	if err != nil || string(data) != "here" {
		t.Fatalf("get after NodeCreated: %q %v", data, err)
	}
}

func confChildWatch(t *testing.T, e *confEnv) {
	w, wr := e.recorder(t, 1), e.client(t, 0)
	const p = "/wkids"
	mustCreate(t, wr, p, nil, 0)
	mustCreate(t, wr, p+"/b", nil, 0)
	syncRead(t, w.Conn, p)
	_, _, ch, err := w.ChildrenW(p)
	must(t, "childrenW", err)

	// Data changes of the node or of a child are not child changes.
	_, err = wr.Set(p, []byte("d"), -1)
	must(t, "set", err)
	_, err = wr.Set(p+"/b", []byte("d"), -1)
	must(t, "set child", err)
	testkit.WaitFor(t, 10*time.Second, "w to see both sets", func() bool {
		_, s1, err1 := w.Get(p)
		_, s2, err2 := w.Get(p + "/b")
		return err1 == nil && err2 == nil && s1.Version == 1 && s2.Version == 1
	})
	noEvent(t, ch, "child watch after data changes")
	eq(t, "child events after data changes", w.count(zk.EventNodeChildrenChanged, p), 0)

	mustCreate(t, wr, p+"/a", nil, 0)
	waitEvent(t, ch, zk.EventNodeChildrenChanged, p)
	kids, _, ch, err := w.ChildrenW(p)
	must(t, "childrenW", err)
	if got := sortedCopy(kids); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("children after the event = %v", got)
	}
	must(t, "delete child", wr.Delete(p+"/a", -1))
	waitEvent(t, ch, zk.EventNodeChildrenChanged, p)
	kids, _, err = w.Children(p)
	must(t, "children", err)
	eq(t, "children after delete event", strings.Join(kids, ","), "b")
}

func confWatchOneShot(t *testing.T, e *confEnv) {
	w, wr := e.recorder(t, 1), e.client(t, 0)
	const p = "/woneshot"
	mustCreate(t, wr, p, []byte("0"), 0)
	syncRead(t, w.Conn, p)
	// The same watch set twice by one client is one watch.
	_, _, ch, err := w.GetW(p)
	must(t, "getW", err)
	_, _, ch2, err := w.GetW(p)
	must(t, "getW again", err)
	_, err = wr.Set(p, []byte("1"), -1)
	must(t, "set", err)
	waitEvent(t, ch, zk.EventNodeDataChanged, p)
	waitEvent(t, ch2, zk.EventNodeDataChanged, p)

	// Not re-armed: a second change sends nothing. A notification for it
	// would precede the reply that shows w the new version.
	_, err = wr.Set(p, []byte("2"), -1)
	must(t, "set", err)
	testkit.WaitFor(t, 10*time.Second, "w to see version 2", func() bool {
		_, st, err := w.Get(p)
		return err == nil && st.Version == 2
	})
	eq(t, "data-change notifications for two sets with one watch", w.count(zk.EventNodeDataChanged, p), 1)

	// Re-armed, it fires again.
	_, _, ch, err = w.GetW(p)
	must(t, "getW", err)
	_, err = wr.Set(p, []byte("3"), -1)
	must(t, "set", err)
	waitEvent(t, ch, zk.EventNodeDataChanged, p)
	eq(t, "data-change notifications after re-arming", w.count(zk.EventNodeDataChanged, p), 2)

	// Child watches are one-shot too.
	_, _, ch, err = w.ChildrenW(p)
	must(t, "childrenW", err)
	mustCreate(t, wr, p+"/a", nil, 0)
	mustCreate(t, wr, p+"/b", nil, 0)
	waitEvent(t, ch, zk.EventNodeChildrenChanged, p)
	testkit.WaitFor(t, 10*time.Second, "w to see both children", func() bool {
		kids, _, err := w.Children(p)
		return err == nil && len(kids) == 2
	})
	eq(t, "child notifications for two creates with one watch", w.count(zk.EventNodeChildrenChanged, p), 1)
}

func confWatchOrdering(t *testing.T, e *confEnv) {
	w, wr := e.client(t, 1), e.client(t, 0)
	const p = "/worder"
	mustCreate(t, wr, p, []byte("0"), 0)
	syncRead(t, w, p)
	for i := 1; i <= 16; i++ {
		want := strconv.Itoa(i)
		_, _, ch, err := w.GetW(p)
		must(t, "getW", err)
		done := make(chan error, 1)
		go func() {
			_, err := wr.Set(p, []byte(want), -1)
			done <- err
		}()
		if i%2 == 0 {
			// Poll: the read that first returns the new data must come
			// after the notification (go-zookeeper hands a notification
			// to the watch channel before it handles the next reply).
			deadline := time.Now().Add(10 * time.Second)
			for {
				data, _, err := w.Get(p)
				must(t, "get", err)
				if string(data) == want {
					select {
					case ev := <-ch:
						if ev.Type != zk.EventNodeDataChanged || ev.Path != p {
							t.Fatalf("round %d: event %v %q", i, ev.Type, ev.Path)
						}
					default:
						t.Fatalf("round %d: a read returned the new data before the watch notification", i)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: new data never visible", i)
				}
			}
		} else {
			// After the notification, a read sees the new state.
			waitEvent(t, ch, zk.EventNodeDataChanged, p)
			data, _, err := w.Get(p)
			must(t, "get", err)
			if string(data) != want {
				t.Fatalf("round %d: read after the notification returned %q, want %q", i, data, want)
			}
		}
		must(t, "set", <-done)
	}

	// The same for child watches.
	for i := 0; i < 6; i++ {
		kid := fmt.Sprintf("c%d", i)
		_, _, ch, err := w.ChildrenW(p)
		must(t, "childrenW", err)
		done := make(chan error, 1)
		go func() {
			_, err := wr.Create(p+"/"+kid, nil, 0, zk.WorldACL(zk.PermAll))
			done <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for {
			kids, _, err := w.Children(p)
			must(t, "children", err)
			if slices.Contains(kids, kid) {
				select {
				case <-ch:
				default:
					t.Fatalf("child round %d: children listed the new child before the watch notification", i)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("child round %d: new child never visible", i)
			}
		}
		must(t, "create", <-done)
	}
}

func confDeleteNotifies(t *testing.T, e *confEnv) {
	w, w2, wr := e.recorder(t, 1), e.client(t, 2), e.client(t, 0)
	const parent, p = "/wdel", "/wdel/x"
	mustCreate(t, wr, parent, nil, 0)
	mustCreate(t, wr, p, []byte("x"), 0)
	syncRead(t, w.Conn, parent)
	syncRead(t, w2, parent)
	_, _, dch, err := w.GetW(p)
	must(t, "getW", err)
	_, _, cch, err := w.ChildrenW(p)
	must(t, "childrenW", err)
	_, _, ech, err := w.ExistsW(p)
	must(t, "existsW", err)
	_, _, pch, err := w.ChildrenW(parent)
	must(t, "childrenW parent", err)
	_, _, d2, err := w2.GetW(p)
	must(t, "getW by a second client", err)

	must(t, "delete", wr.Delete(p, -1))
	waitEvent(t, dch, zk.EventNodeDeleted, p)
	waitEvent(t, cch, zk.EventNodeDeleted, p)
	waitEvent(t, ech, zk.EventNodeDeleted, p)
	waitEvent(t, pch, zk.EventNodeChildrenChanged, parent)
	waitEvent(t, d2, zk.EventNodeDeleted, p)
	// This reply follows every notification the delete caused for w.
	mustExist(t, w.Conn, p, false)
	eq(t, "NodeDeleted notifications to a client with data and child watches", w.count(zk.EventNodeDeleted, p), 1)
	eq(t, "NodeChildrenChanged notifications for the parent", w.count(zk.EventNodeChildrenChanged, parent), 1)
}

// ---- versions and multi ----

func confVersions(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	const p = "/vers"
	mustCreate(t, a, p, []byte("v0"), 0)
	_, err := a.Set(p, []byte("x"), 5)
	wantErr(t, "set with a wrong version", err, zk.ErrBadVersion)
	data, st, err := a.Get(p)
	must(t, "get", err)
	if string(data) != "v0" || st.Version != 0 {
		t.Errorf("after a failed set: %q version %d", data, st.Version)
	}
	st, err = a.Set(p, []byte("v1"), 0)
	must(t, "set with the right version", err)
	eq(t, "version", st.Version, int32(1))
	st, err = a.Set(p, []byte("v2"), -1)
	must(t, "set with -1", err)
	eq(t, "version", st.Version, int32(2))

	syncRead(t, b, p)
	wantErr(t, "delete with a wrong version", b.Delete(p, 1), zk.ErrBadVersion)
	mustExist(t, b, p, true)

	_, err = b.SetACL(p, zk.WorldACL(zk.PermAll), 3)
	wantErr(t, "setACL with a wrong aversion", err, zk.ErrBadVersion)
	st, err = b.SetACL(p, zk.WorldACL(zk.PermAll), 0)
	must(t, "setACL with the right aversion", err)
	eq(t, "aversion", st.Aversion, int32(1))
	st, err = b.SetACL(p, zk.WorldACL(zk.PermAll), -1)
	must(t, "setACL with -1", err)
	eq(t, "aversion", st.Aversion, int32(2))
	eq(t, "version after setACL", st.Version, int32(2))

	_, err = b.Multi(&zk.CheckVersionRequest{Path: p, Version: 7})
	wantErr(t, "check with a wrong version", err, zk.ErrBadVersion)
	_, err = b.Multi(&zk.CheckVersionRequest{Path: p, Version: 2})
	must(t, "check with the right version", err)
	_, err = b.Multi(&zk.CheckVersionRequest{Path: p, Version: -1})
	must(t, "check with -1", err)

	must(t, "delete with the right version", b.Delete(p, 2))
	mustCreate(t, b, p, nil, 0)
	must(t, "delete with -1", b.Delete(p, -1))
	mustExist(t, b, p, false)
}

func confMultiAtomic(t *testing.T, e *confEnv) {
	a, b := e.client(t, 1), e.client(t, 2)
	mustCreate(t, a, "/multi", nil, 0)
	mustCreate(t, a, "/multi/exists", []byte("e"), 0)
	before := mustStat(t, a, "/multi")

	res, err := a.Multi(
		&zk.CreateRequest{Path: "/multi/new", Data: []byte("n"), Acl: zk.WorldACL(zk.PermAll)},
		&zk.SetDataRequest{Path: "/multi/missing", Data: []byte("x"), Version: -1},
		&zk.SetDataRequest{Path: "/multi/exists", Data: []byte("changed"), Version: -1},
	)
	wantErr(t, "multi whose second op fails", err, zk.ErrNoNode)
	if len(res) != 3 {
		t.Fatalf("multi results: %d, want 3: %+v", len(res), res)
	}
	if res[0].Error != nil {
		t.Errorf("result of the op before the failure: %v, want none (rolled back)", res[0].Error)
	}
	wantErr(t, "result of the failing op", res[1].Error, zk.ErrNoNode)
	if res[2].Error == nil {
		t.Errorf("result of the op after the failure: no error, want runtime inconsistency")
	}

	syncRead(t, b, "/multi")
	mustExist(t, b, "/multi/new", false)
	data, st, err := b.Get("/multi/exists")
	must(t, "get", err)
	if string(data) != "e" || st.Version != 0 {
		t.Errorf("/multi/exists after the failed multi: %q version %d", data, st.Version)
	}
	eq(t, "parent after the failed multi", *mustStat(t, b, "/multi"), *before)

	// A failing check undoes the ops before it.
	_, err = a.Multi(
		&zk.CreateRequest{Path: "/multi/new2", Acl: zk.WorldACL(zk.PermAll)},
		&zk.DeleteRequest{Path: "/multi/exists", Version: -1},
		&zk.CheckVersionRequest{Path: "/multi/exists", Version: 3},
	)
	// The check runs after the delete, so it finds no node.
	wantErr(t, "multi with a failing check", err, zk.ErrNoNode)
	_, err = a.Multi(
		&zk.CreateRequest{Path: "/multi/new2", Acl: zk.WorldACL(zk.PermAll)},
		&zk.CheckVersionRequest{Path: "/multi/exists", Version: 3},
	)
	wantErr(t, "multi with a failing check", err, zk.ErrBadVersion)
	// Two creates of one path: the second sees the first.
	_, err = a.Multi(
		&zk.CreateRequest{Path: "/multi/dup", Acl: zk.WorldACL(zk.PermAll)},
		&zk.CreateRequest{Path: "/multi/dup", Acl: zk.WorldACL(zk.PermAll)},
	)
	wantErr(t, "multi creating one path twice", err, zk.ErrNodeExists)
	syncRead(t, b, "/multi")
	for _, p := range []string{"/multi/new2", "/multi/dup"} {
		mustExist(t, b, p, false)
	}
	mustExist(t, b, "/multi/exists", true)
	eq(t, "parent after the failed multis", *mustStat(t, b, "/multi"), *before)
}

func confMultiApplied(t *testing.T, e *confEnv) {
	a, b := e.client(t, 2), e.client(t, 0)
	mustCreate(t, a, "/multiok", nil, 0)
	mustCreate(t, a, "/multiok/set", []byte("s"), 0)
	mustCreate(t, a, "/multiok/del", nil, 0)
	res, err := a.Multi(
		&zk.CreateRequest{Path: "/multiok/new", Data: []byte("n"), Acl: zk.WorldACL(zk.PermAll)},
		&zk.SetDataRequest{Path: "/multiok/set", Data: []byte("s2"), Version: 0},
		&zk.DeleteRequest{Path: "/multiok/del", Version: -1},
		// Ops see the effects of the ops before them.
		&zk.CheckVersionRequest{Path: "/multiok/set", Version: 1},
		&zk.CreateRequest{Path: "/multiok/seq-", Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagSequence},
	)
	must(t, "multi", err)
	if len(res) != 5 {
		t.Fatalf("multi results: %d, want 5", len(res))
	}
	for i, r := range res {
		if r.Error != nil {
			t.Errorf("result %d: %v", i, r.Error)
		}
	}
	eq(t, "created path", res[0].String, "/multiok/new")
	if res[1].Stat == nil {
		t.Fatalf("no stat in the setData result")
	}
	eq(t, "setData result version", res[1].Stat.Version, int32(1))
	eq(t, "sequential create path", res[4].String, "/multiok/seq-0000000003")

	syncRead(t, b, "/multiok")
	data, _, err := b.Get("/multiok/new")
	if err != nil || string(data) != "n" {
		t.Errorf("created node: %q %v", data, err)
	}
	data, sst, err := b.Get("/multiok/set")
	if err != nil || string(data) != "s2" || sst.Version != 1 {
		t.Errorf("set node: %q %+v %v", data, sst, err)
	}
	mustExist(t, b, "/multiok/del", false)
	// One transaction, one zxid.
	nst := mustStat(t, b, "/multiok/new")
	qst := mustStat(t, b, "/multiok/seq-0000000003")
	pst := mustStat(t, b, "/multiok")
	eq(t, "setData mzxid vs create czxid", sst.Mzxid, nst.Czxid)
	eq(t, "second create czxid", qst.Czxid, nst.Czxid)
	eq(t, "parent pzxid", pst.Pzxid, nst.Czxid)
	eq(t, "setData result stat", *res[1].Stat, *sst)

	res, err = a.Multi()
	must(t, "empty multi", err)
	eq(t, "empty multi results", len(res), 0)
}

// ---- ACLs ----

func confACLWorld(t *testing.T, e *confEnv) {
	a, b := e.client(t, 0), e.client(t, 1)
	mustCreate(t, a, "/aclw", nil, 0)
	_, err := a.Create("/aclw/r", []byte("r"), 0, zk.WorldACL(zk.PermRead))
	must(t, "create read-only node", err)
	syncRead(t, b, "/aclw")
	data, _, err := b.Get("/aclw/r")
	if err != nil || string(data) != "r" {
		t.Errorf("get of a world-readable node: %q %v", data, err)
	}
	_, err = b.Set("/aclw/r", []byte("x"), -1)
	wantErr(t, "set without WRITE", err, zk.ErrNoAuth)
	_, err = b.Create("/aclw/r/c", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "create without CREATE", err, zk.ErrNoAuth)
	_, err = b.SetACL("/aclw/r", zk.WorldACL(zk.PermAll), -1)
	wantErr(t, "setACL without ADMIN", err, zk.ErrNoAuth)
	acl, _, err := b.GetACL("/aclw/r")
	must(t, "getACL with READ", err)
	if !slices.Equal(acl, zk.WorldACL(zk.PermRead)) {
		t.Errorf("getACL = %v", acl)
	}

	// DELETE is checked on the parent.
	_, err = a.Create("/aclw/nodel", nil, 0, zk.WorldACL(zk.PermAll))
	must(t, "create", err)
	mustCreate(t, a, "/aclw/nodel/c", nil, 0)
	_, err = a.SetACL("/aclw/nodel", zk.WorldACL(zk.PermAll&^zk.PermDelete), -1)
	must(t, "setACL", err)
	syncRead(t, b, "/aclw")
	wantErr(t, "delete without DELETE on the parent", b.Delete("/aclw/nodel/c", -1), zk.ErrNoAuth)
	_, err = b.Set("/aclw/nodel/c", []byte("ok"), -1)
	must(t, "set of the child (its own ACL allows)", err)

	// Without READ: no get, no children.
	_, err = a.Create("/aclw/wo", []byte("secret"), 0, zk.WorldACL(zk.PermWrite))
	must(t, "create write-only node", err)
	syncRead(t, b, "/aclw")
	_, _, err = b.Get("/aclw/wo")
	wantErr(t, "get without READ", err, zk.ErrNoAuth)
	_, _, err = b.Children("/aclw/wo")
	wantErr(t, "children without READ", err, zk.ErrNoAuth)
	_, err = b.Set("/aclw/wo", []byte("w"), -1)
	must(t, "set with WRITE", err)
}

func confACLDigest(t *testing.T, e *confEnv) {
	owner := e.client(t, 0)
	const p = "/acld/d"
	mustCreate(t, owner, "/acld", nil, 0)
	mustCreate(t, owner, p, []byte("secret"), 0)
	mustCreate(t, owner, p+"/c", nil, 0)
	_, err := owner.SetACL(p, zk.DigestACL(zk.PermAll, "alice", "pw"), -1)
	must(t, "setACL digest", err)

	anon := e.client(t, 1)
	syncRead(t, anon, "/acld")
	_, _, err = anon.Get(p)
	wantErr(t, "get without auth", err, zk.ErrNoAuth)
	_, err = anon.Set(p, []byte("x"), -1)
	wantErr(t, "set without auth", err, zk.ErrNoAuth)
	_, _, err = anon.Children(p)
	wantErr(t, "children without auth", err, zk.ErrNoAuth)
	_, err = anon.Create(p+"/x", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "create without auth", err, zk.ErrNoAuth)
	wantErr(t, "delete without auth", anon.Delete(p+"/c", -1), zk.ErrNoAuth)
	_, err = anon.SetACL(p, zk.WorldACL(zk.PermAll), -1)
	wantErr(t, "setACL without auth", err, zk.ErrNoAuth)
	_, _, err = anon.GetACL(p)
	wantErr(t, "getACL without READ or ADMIN", err, zk.ErrNoAuth)

	// Digest authentication never fails; a wrong password is just
	// another identity.
	wrong := e.client(t, 2)
	must(t, "addAuth with a wrong password", wrong.AddAuth("digest", []byte("alice:nope")))
	syncRead(t, wrong, "/acld")
	_, _, err = wrong.Get(p)
	wantErr(t, "get with a wrong password", err, zk.ErrNoAuth)

	alice := e.client(t, 1)
	must(t, "addAuth", alice.AddAuth("digest", []byte("alice:pw")))
	syncRead(t, alice, "/acld")
	data, _, err := alice.Get(p)
	if err != nil || string(data) != "secret" {
		t.Fatalf("get with auth: %q %v", data, err)
	}
	kids, _, err := alice.Children(p)
	must(t, "children with auth", err)
	eq(t, "children", strings.Join(kids, ","), "c")
	mustCreate(t, alice, p+"/x", nil, 0)
	must(t, "delete with auth", alice.Delete(p+"/x", -1))
	must(t, "delete with auth", alice.Delete(p+"/c", -1))
	_, err = alice.Set(p, []byte("new"), -1)
	must(t, "set with auth", err)
	acl, _, err := alice.GetACL(p)
	must(t, "getACL with auth", err)
	if !slices.Equal(acl, zk.DigestACL(zk.PermAll, "alice", "pw")) {
		t.Errorf("getACL = %v, want %v", acl, zk.DigestACL(zk.PermAll, "alice", "pw"))
	}
	_, err = alice.SetACL(p, zk.WorldACL(zk.PermAll), -1)
	must(t, "setACL with auth", err)
	syncRead(t, anon, "/acld")
	data, _, err = anon.Get(p)
	if err != nil || string(data) != "new" {
		t.Errorf("get after the ACL was opened: %q %v", data, err)
	}
}

func confACLRedacted(t *testing.T, e *confEnv) {
	owner := e.client(t, 0)
	bob := zk.DigestACL(zk.PermAll, "bob", "pw")[0]
	acl := []zk.ACL{bob, {Perms: zk.PermRead, Scheme: "world", ID: "anyone"}}
	_, err := owner.Create("/aclred", []byte("r"), 0, acl)
	must(t, "create", err)
	// READ without ADMIN: the digest hash is replaced by "x".
	anon := e.client(t, 1)
	syncRead(t, anon, "/aclred")
	got, _, err := anon.GetACL("/aclred")
	must(t, "getACL with READ only", err)
	want := []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: "bob:x"}, acl[1]}
	if !slices.Equal(got, want) {
		t.Errorf("getACL with READ only = %v, want %v", got, want)
	}
	// With ADMIN the hash is shown.
	must(t, "addAuth", anon.AddAuth("digest", []byte("bob:pw")))
	got, _, err = anon.GetACL("/aclred")
	must(t, "getACL with ADMIN", err)
	if !slices.Equal(got, acl) {
		t.Errorf("getACL with ADMIN = %v, want %v", got, acl)
	}
}

func confACLAuth(t *testing.T, e *confEnv) {
	c := e.client(t, 0)
	_, err := c.Create("/aclauth", nil, 0, zk.AuthACL(zk.PermAll))
	wantErr(t, "auth ACL without any authenticated identity", err, zk.ErrInvalidACL)
	must(t, "addAuth", c.AddAuth("digest", []byte("carol:pw")))
	_, err = c.Create("/aclauth", []byte("x"), 0, zk.AuthACL(zk.PermAll))
	must(t, "create with auth ACL", err)
	acl, _, err := c.GetACL("/aclauth")
	must(t, "getACL", err)
	if !slices.Equal(acl, zk.DigestACL(zk.PermAll, "carol", "pw")) {
		t.Errorf("auth ACL expanded to %v, want %v", acl, zk.DigestACL(zk.PermAll, "carol", "pw"))
	}
	anon := e.client(t, 1)
	syncRead(t, anon, "/aclauth")
	_, _, err = anon.Get("/aclauth")
	wantErr(t, "get without auth", err, zk.ErrNoAuth)
	carol2 := e.client(t, 2)
	must(t, "addAuth", carol2.AddAuth("digest", []byte("carol:pw")))
	syncRead(t, carol2, "/aclauth")
	data, _, err := carol2.Get("/aclauth")
	if err != nil || string(data) != "x" {
		t.Errorf("get by another session of the same identity: %q %v", data, err)
	}
	// setACL with the auth scheme expands the same way.
	_, err = carol2.SetACL("/aclauth", zk.AuthACL(zk.PermRead|zk.PermAdmin), -1)
	must(t, "setACL auth", err)
	acl, _, err = carol2.GetACL("/aclauth")
	must(t, "getACL", err)
	if !slices.Equal(acl, zk.DigestACL(zk.PermRead|zk.PermAdmin, "carol", "pw")) {
		t.Errorf("auth ACL after setACL = %v", acl)
	}
}

func confACLIP(t *testing.T, e *confEnv) {
	a := e.client(t, 0)
	mustCreate(t, a, "/aclip", nil, 0)
	for p, id := range map[string]string{
		"/aclip/local":  "127.0.0.1",
		"/aclip/subnet": "127.0.0.0/8",
		"/aclip/other":  "10.0.0.1/32",
	} {
		if _, err := a.Create(p, []byte("ip"), 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: id}}); err != nil {
			t.Fatalf("create %s with ip:%s: %v", p, id, err)
		}
	}
	b := e.client(t, 1) // connects from 127.0.0.1
	syncRead(t, b, "/aclip")
	for _, p := range []string{"/aclip/local", "/aclip/subnet"} {
		if data, _, err := b.Get(p); err != nil || string(data) != "ip" {
			t.Errorf("get %s from 127.0.0.1: %q %v", p, data, err)
		}
		if _, err := b.Set(p, []byte("ip"), -1); err != nil {
			t.Errorf("set %s from 127.0.0.1: %v", p, err)
		}
	}
	_, _, err := b.Get("/aclip/other")
	wantErr(t, "get of an ip:10.0.0.1/32 node from 127.0.0.1", err, zk.ErrNoAuth)
	_, err = b.Set("/aclip/other", nil, -1)
	wantErr(t, "set of an ip:10.0.0.1/32 node from 127.0.0.1", err, zk.ErrNoAuth)
}

func confACLInvalid(t *testing.T, e *confEnv) {
	a := e.client(t, 1)
	mustCreate(t, a, "/aclbad", nil, 0)
	bad := []struct {
		name string
		acl  []zk.ACL
	}{
		{"digest id without ':'", []zk.ACL{{Perms: zk.PermAll, Scheme: "digest", ID: "nocolon"}}},
		{"unknown scheme", []zk.ACL{{Perms: zk.PermAll, Scheme: "nosuchscheme", ID: "x"}}},
		{"world id other than anyone", []zk.ACL{{Perms: zk.PermAll, Scheme: "world", ID: "someone"}}},
		{"bad ip address", []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "300.1.1.1"}}},
		{"good entry plus a bad one", []zk.ACL{zk.WorldACL(zk.PermAll)[0], {Perms: zk.PermAll, Scheme: "nosuchscheme", ID: "x"}}},
		{"empty list", []zk.ACL{}},
		{"null list", nil},
	}
	for i, tc := range bad {
		p := fmt.Sprintf("/aclbad/n%d", i)
		_, err := a.Create(p, nil, 0, tc.acl)
		wantErr(t, "create with "+tc.name, err, zk.ErrInvalidACL)
		mustExist(t, a, p, false)
		_, err = a.SetACL("/aclbad", tc.acl, -1)
		wantErr(t, "setACL with "+tc.name, err, zk.ErrInvalidACL)
	}
	st := mustStat(t, a, "/aclbad")
	eq(t, "aversion after failed setACLs", st.Aversion, int32(0))
}

// ---- errors and paths ----

func confErrors(t *testing.T, e *confEnv) {
	a := e.client(t, 2)
	mustCreate(t, a, "/errs", nil, 0)
	mustCreate(t, a, "/errs/kid", nil, 0)
	_, err := a.Create("/errs", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "create of an existing node", err, zk.ErrNodeExists)
	_, err = a.Create("/", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "create of /", err, zk.ErrNodeExists)
	_, err = a.Create("/errs/none/x", nil, 0, zk.WorldACL(zk.PermAll))
	wantErr(t, "create under a missing parent", err, zk.ErrNoNode)
	_, _, err = a.Get("/errs/none")
	wantErr(t, "get of a missing node", err, zk.ErrNoNode)
	_, err = a.Set("/errs/none", nil, -1)
	wantErr(t, "set of a missing node", err, zk.ErrNoNode)
	wantErr(t, "delete of a missing node", a.Delete("/errs/none", -1), zk.ErrNoNode)
	_, _, err = a.Children("/errs/none")
	wantErr(t, "children of a missing node", err, zk.ErrNoNode)
	_, _, _, err = a.ChildrenW("/errs/none")
	wantErr(t, "childrenW of a missing node", err, zk.ErrNoNode)
	_, _, _, err = a.GetW("/errs/none")
	wantErr(t, "getW of a missing node", err, zk.ErrNoNode)
	_, _, err = a.GetACL("/errs/none")
	wantErr(t, "getACL of a missing node", err, zk.ErrNoNode)
	_, err = a.SetACL("/errs/none", zk.WorldACL(zk.PermAll), -1)
	wantErr(t, "setACL of a missing node", err, zk.ErrNoNode)
	_, err = a.Multi(&zk.CheckVersionRequest{Path: "/errs/none", Version: -1})
	wantErr(t, "check of a missing node", err, zk.ErrNoNode)
	ok, _, err := a.Exists("/errs/none")
	if ok || err != nil {
		t.Errorf("exists of a missing node: %v %v", ok, err)
	}
	wantErr(t, "delete of a node with children", a.Delete("/errs", -1), zk.ErrNotEmpty)
	_, err = a.Multi(&zk.DeleteRequest{Path: "/errs", Version: -1})
	wantErr(t, "delete of a node with children in a multi", err, zk.ErrNotEmpty)
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"} {
		wantErr(t, "delete of "+p, a.Delete(p, -1), zk.ErrBadArguments)
	}
	// TTL nodes are off, as on a default ZooKeeper (Unimplemented).
	if _, err := a.CreateTTL("/errs/ttl", nil, zk.FlagTTL, zk.WorldACL(zk.PermAll), time.Minute); err == nil {
		t.Errorf("createTTL succeeded with TTL nodes disabled")
	}
	mustExist(t, a, "/errs/ttl", false)
	mustExist(t, a, "/errs/kid", true)
}

var badPaths = []string{"a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "", "/a\x00b"}

func confBadPathsClient(t *testing.T, e *confEnv) {
	a := e.client(t, 0)
	isBad := func(err error) bool {
		return errors.Is(err, zk.ErrInvalidPath) || errors.Is(err, zk.ErrBadArguments)
	}
	for _, p := range badPaths {
		if _, err := a.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); !isBad(err) {
			t.Errorf("create %q: %v, want an invalid-path error", p, err)
		}
		if _, _, err := a.Get(p); !isBad(err) {
			t.Errorf("get %q: %v, want an invalid-path error", p, err)
		}
		if _, err := a.Set(p, nil, -1); !isBad(err) {
			t.Errorf("set %q: %v, want an invalid-path error", p, err)
		}
		if err := a.Delete(p, -1); !isBad(err) {
			t.Errorf("delete %q: %v, want an invalid-path error", p, err)
		}
	}
	mustExist(t, a, "/a", false)
}

func confBadPathsServer(t *testing.T, e *confEnv) {
	rc := rawSession(t, e.addr(1), confSessionTimeout)
	var cr wire.CreateResponse
	if code := rc.call(wire.OpCreate, &wire.CreateRequest{Path: "/bp", ACL: openACL}, &cr); code != wire.OK {
		t.Fatalf("create /bp: %v", code)
	}
	// The parent of these exists (or there is none), so ZooKeeper
	// rejects the path itself.
	strict := []string{"bp", "", "/bp/", "/bp/.", "/bp/..", "/bp/a\x00b"}
	// ZooKeeper looks up the would-be parent ("/bp/", "/bp/.") first and
	// may report NoNode.
	loose := []string{"/bp//b", "/bp/./b", "/bp/../b"}
	badOrNoNode := func(c wire.Code) bool { return c == wire.ErrBadArguments || c == wire.ErrNoNode }
	for _, p := range append(slices.Clone(strict), loose...) {
		isStrict := slices.Contains(strict, p)
		code := rc.call(wire.OpCreate, &wire.CreateRequest{Path: p, ACL: openACL}, nil)
		if isStrict && code != wire.ErrBadArguments || !isStrict && !badOrNoNode(code) {
			t.Errorf("create %q: %v", p, code)
		}
		if code := rc.call(wire.OpSetData, &wire.SetDataRequest{Path: p, Data: []byte("x"), Version: -1}, nil); code != wire.ErrBadArguments {
			t.Errorf("setData %q: %v, want %v", p, code, wire.ErrBadArguments)
		}
		code = rc.call(wire.OpDelete, &wire.DeleteRequest{Path: p, Version: -1}, nil)
		if !strings.Contains(p, "/") && code != wire.ErrBadArguments || !badOrNoNode(code) {
			t.Errorf("delete %q: %v", p, code)
		}
		// Reads do not validate paths: a bad one names no node, and the
		// empty one is the root.
		for _, op := range []int32{wire.OpGetData, wire.OpExists, wire.OpGetChildren2} {
			want := wire.ErrNoNode
			switch {
			case p == "":
				want = wire.OK
			case op == wire.OpExists && strings.ContainsRune(p, 0):
				want = wire.ErrBadArguments // exists alone checks for a NUL
			}
			if code := rc.call(op, &wire.PathWatchRequest{Path: p}, nil); code != want {
				t.Errorf("%s %q: %v, want %v", wire.OpName(op), p, code, want)
			}
		}
	}
	// Nothing was created, and the connection is still fine.
	rc.ping()
	var gc wire.GetChildren2Response
	if code := rc.call(wire.OpGetChildren2, &wire.PathWatchRequest{Path: "/bp"}, &gc); code != wire.OK {
		t.Fatalf("getChildren2 /bp: %v", code)
	}
	eq(t, "children of /bp after bad creates", len(gc.Children), 0)
	// A sequential create may end in "/" (the number is appended first).
	if code := rc.call(wire.OpCreate, &wire.CreateRequest{Path: "/bp/", ACL: openACL, Flags: wire.FlagPersistentSequential}, &cr); code != wire.OK {
		t.Fatalf("sequential create /bp/: %v", code)
	}
	eq(t, "sequential create /bp/", cr.Path, "/bp/0000000000")
}

func confDataTooLarge(t *testing.T, e *confEnv) {
	big := make([]byte, 1<<20+1)
	a := e.client(t, 0)
	mustCreate(t, a, "/big", []byte("small"), 0)
	// Clients with go-zookeeper's default 1.5 MiB buffers, which can send
	// the request.
	c1 := dialZK(t, []string{e.addr(0)}, nil, true)
	if _, err := c1.Create("/big/c", big, 0, zk.WorldACL(zk.PermAll)); err == nil {
		t.Errorf("create with %d bytes of data succeeded", len(big))
	}
	c2 := dialZK(t, []string{e.addr(1)}, nil, true)
	if _, err := c2.Set("/big", big, -1); err == nil {
		t.Errorf("set with %d bytes of data succeeded", len(big))
	}
	obs := e.client(t, 2)
	syncRead(t, obs, "/big")
	mustExist(t, obs, "/big/c", false)
	data, st, err := obs.Get("/big")
	if err != nil || string(data) != "small" || st.Version != 0 {
		t.Errorf("/big after the refused set: %q %+v %v", data, st, err)
	}
	// Every member still serves.
	for i := 0; i < e.n; i++ {
		e.checkServing(t, i, fmt.Sprintf("/big-alive-%d", i))
	}
}

func confSystemNodes(t *testing.T, e *confEnv) {
	a := e.client(t, 1)
	for _, p := range []string{"/zookeeper", "/zookeeper/config", "/zookeeper/quota"} {
		mustExist(t, a, p, true)
	}
	kids, _, err := a.Children("/zookeeper")
	must(t, "children /zookeeper", err)
	for _, k := range []string{"config", "quota"} {
		if !slices.Contains(kids, k) {
			t.Errorf("/zookeeper children %v lack %q", kids, k)
		}
	}
	root, _, err := a.Children("/")
	must(t, "children /", err)
	if !slices.Contains(root, "zookeeper") {
		t.Errorf("/ children %v lack zookeeper", root)
	}
	_, _, err = a.Get("/zookeeper/config")
	must(t, "get /zookeeper/config", err)
	acl, _, err := a.GetACL("/zookeeper/config")
	must(t, "getACL /zookeeper/config", err)
	if !slices.Equal(acl, zk.WorldACL(zk.PermRead)) {
		t.Errorf("/zookeeper/config ACL = %v, want world:anyone read", acl)
	}
	_, err = a.Set("/zookeeper/config", []byte("x"), -1)
	wantErr(t, "set /zookeeper/config", err, zk.ErrNoAuth)
	// Ordinary nodes under /zookeeper are allowed.
	mustCreate(t, a, "/zookeeper/conformance", nil, 0)
	must(t, "delete /zookeeper/conformance", a.Delete("/zookeeper/conformance", -1))
}

// ---- raw protocol abuse ----

func confUnknownOpcode(t *testing.T, e *confEnv) {
	rc := rawSession(t, e.addr(1), confSessionTimeout)
	h, _, err := rc.recv(rc.send(999, nil))
	if err != nil {
		t.Fatalf("no reply to opcode 999: %v", err)
	}
	eq(t, "error for opcode 999", h.Err, wire.ErrUnimplemented)
	// ZooKeeper 3.8 then closes the connection (UnimplementedRequestProcessor
	// calls sendCloseSession) but keeps the session; keeping the connection
	// is also acceptable. Either way the session must still be usable.
	ph, _, err := rc.recv(rc.sendXid(wire.XidPing, wire.OpPing, nil))
	if err == nil {
		eq(t, "ping after opcode 999", ph.Err, wire.OK)
		t.Logf("connection kept after opcode 999")
	} else {
		t.Logf("connection closed after opcode 999 (%v), as ZooKeeper 3.8 does", err)
		c, ok := rawHandshake(t, e.addr(1), wire.ConnectRequest{LastZxidSeen: rc.lastZxid, Timeout: 6000,
			SessionID: rc.resp.SessionID, Passwd: rc.resp.Passwd})
		if !ok || c.resp.SessionID != rc.resp.SessionID {
			t.Fatalf("session lost after opcode 999: %v %+v", ok, c.resp)
		}
		c.ping()
	}
	e.checkServing(t, 1, "/unknownop-alive")
}

func confBadInput(t *testing.T, e *confEnv) {
	frame := func(n uint32, body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, n), body...)
	}
	request := func(xid, op int32, body []byte) []byte {
		e := wire.NewEncoder(nil)
		(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
		b := append(slices.Clone(e.Bytes()), body...)
		return frame(uint32(len(b)), b)
	}
	type tc struct {
		name      string
		handshake bool   // send a valid handshake first
		send      []byte // then these bytes
		halfClose bool   // then close our write side
	}
	cases := []tc{
		{name: "garbage", send: []byte("GET / HTTP/1.1\r\nHost: zk\r\n\r\n")},
		{name: "negative length", send: frame(0xffffffff, []byte("abcd"))},
		{name: "huge length", send: frame(0x7fffffff, []byte("abcd"))},
		{name: "truncated connect frame", send: frame(44, make([]byte, 10)), halfClose: true},
		{name: "malformed connect body", send: frame(6, []byte{1, 2, 3, 4, 5, 6})},
		{name: "huge length after handshake", handshake: true, send: frame(0x7fffffff, nil)},
		{name: "negative length after handshake", handshake: true, send: frame(0x80000000, nil)},
		{name: "truncated frame after handshake", handshake: true, send: frame(100, make([]byte, 8)), halfClose: true},
		{name: "frame shorter than a header", handshake: true, send: frame(3, []byte{0, 0, 0})},
		{name: "malformed getData body", handshake: true,
			send: request(1, wire.OpGetData, append(binary.BigEndian.AppendUint32(nil, 1000), "ab"...))},
		{name: "malformed create body", handshake: true,
			send: request(1, wire.OpCreate, binary.BigEndian.AppendUint32(nil, 0xfffffff0))},
		{name: "malformed multi body", handshake: true,
			send: request(1, wire.OpMulti, []byte{0, 0, 0, 1, 0, 0, 0})},
	}
	for i, c := range cases {
		member := i % e.n
		var nc net.Conn
		if c.handshake {
			rc := rawSession(t, e.addr(member), confSessionTimeout)
			nc = rc.nc
		} else {
			nc = rawDial(t, e.addr(member))
		}
		_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(c.send); err != nil {
			t.Fatalf("%s: write: %v", c.name, err)
		}
		if c.halfClose {
			if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatalf("%s: close write: %v", c.name, err)
			}
		}
		expectClosed(t, nc, c.name)
		e.checkServing(t, member, fmt.Sprintf("/badinput-%d", i))
	}
}

func confFourLetterWords(t *testing.T, e *confEnv) {
	oks := zk.FLWRuok(e.c.Servers(), 5*time.Second)
	for i, ok := range oks {
		if !ok {
			t.Errorf("member %d: go-zookeeper FLWRuok failed", i)
		}
	}
	leaders := 0
	for i := 0; i < e.n; i++ {
		addr := e.addr(i)
		eq(t, fmt.Sprintf("member %d ruok", i), fourLetter(t, addr, "ruok"), "imok")
		eq(t, fmt.Sprintf("member %d isro", i), strings.TrimSpace(fourLetter(t, addr, "isro")), "rw")

		srvr := fourLetter(t, addr, "srvr")
		for _, s := range []string{"Zookeeper version: ", "Mode: ", "Node count: "} {
			if !strings.Contains(srvr, s) {
				t.Errorf("member %d srvr lacks %q:\n%s", i, s, srvr)
			}
		}
		srvrMode := ""
		for _, line := range strings.Split(srvr, "\n") {
			if v, ok := strings.CutPrefix(line, "Mode: "); ok {
				srvrMode = v
			}
			if v, ok := strings.CutPrefix(line, "Node count: "); ok {
				if n, err := strconv.Atoi(v); err != nil || n < 4 {
					t.Errorf("member %d srvr node count %q", i, v)
				}
			}
		}

		mntr := fourLetter(t, addr, "mntr")
		kv := map[string]string{}
		for _, line := range strings.Split(strings.TrimRight(mntr, "\n"), "\n") {
			k, v, ok := strings.Cut(line, "\t")
			if !ok {
				t.Errorf("member %d mntr line %q is not tab-separated", i, line)
				continue
			}
			kv[k] = v
		}
		if kv["zk_version"] == "" {
			t.Errorf("member %d mntr lacks zk_version:\n%s", i, mntr)
		}
		state := kv["zk_server_state"]
		if !validMode(state) {
			t.Errorf("member %d zk_server_state %q", i, state)
		}
		eq(t, fmt.Sprintf("member %d srvr mode vs mntr state", i), srvrMode, state)
		if e.n == 1 {
			eq(t, "single member mode", state, "standalone")
		} else if state == "standalone" {
			t.Errorf("member %d of 3 reports standalone", i)
		}
		if state == "leader" {
			leaders++
		}
		confFourLetterFigures(t, e, i, srvr, kv)
	}
	if e.n == 3 && leaders != 1 {
		t.Errorf("%d members report leader", leaders)
	}
}

// flwLatency is srvr's latency line in ZooKeeper 3.8's number formats:
// whole milliseconds around a Java double.
var flwLatency = regexp.MustCompile(`(?m)^Latency min/avg/max: \d+/\d+\.\d+(E-?\d+)?/\d+$`)

// confFourLetterFigures checks figures of member i's words that come from
// its own state: the latency format, descriptors, the quorum and, on the
// leader, its followers in sync; and conf's layout for its role.
func confFourLetterFigures(t *testing.T, e *confEnv, i int, srvr string, mntr map[string]string) {
	t.Helper()
	if !flwLatency.MatchString(srvr) {
		t.Errorf("member %d srvr latency is not in ZooKeeper's format:\n%s", i, srvr)
	}
	for _, k := range []string{"zk_open_file_descriptor_count", "zk_max_file_descriptor_count", "zk_uptime"} {
		if n, err := strconv.ParseInt(mntr[k], 10, 64); err != nil || n <= 0 {
			t.Errorf("member %d %s = %q, want a positive count", i, k, mntr[k])
		}
	}
	state := mntr["zk_server_state"]
	if e.n == 3 {
		eq(t, fmt.Sprintf("member %d zk_quorum_size", i), mntr["zk_quorum_size"], "3")
	} else if _, ok := mntr["zk_quorum_size"]; ok {
		t.Errorf("standalone member reports zk_quorum_size")
	}
	if state == "leader" {
		synced := ""
		ok := testkit.Poll(10*time.Second, func() bool {
			kv := map[string]string{}
			for _, line := range strings.Split(fourLetter(t, e.addr(i), "mntr"), "\n") {
				if k, v, ok := strings.Cut(line, "\t"); ok {
					kv[k] = v
				}
			}
			synced = kv["zk_synced_followers"]
			return synced == "2" && kv["zk_learners"] == "2"
		})
		if !ok {
			t.Errorf("leader's zk_synced_followers = %q, want 2", synced)
		}
	}
	// A member lists the membership once it has applied the ensemble's
	// first entries; a follower just started may be a heartbeat behind.
	conf := fourLetter(t, e.addr(i), "conf")
	if e.n == 3 {
		testkit.Poll(10*time.Second, func() bool {
			conf = fourLetter(t, e.addr(i), "conf")
			return strings.Contains(conf, "\nversion=")
		})
	}
	servers := 0
	for _, line := range strings.Split(strings.TrimSuffix(conf, "\n"), "\n") {
		switch {
		case line == "membership: ":
		case strings.HasPrefix(line, "server."):
			servers++
			if !strings.HasSuffix(line, ":participant") || strings.Count(line, ":") != 3 {
				t.Errorf("member %d conf line %q is not host:port:port:participant", i, line)
			}
		case !strings.Contains(line, "="):
			t.Errorf("member %d conf line %q is not key=value", i, line)
		}
	}
	if e.n == 3 && (servers != 3 || strings.HasSuffix(conf, "\n") || !strings.Contains(conf, "\nversion=")) {
		t.Errorf("member %d conf lacks ZooKeeper's membership block (3 servers, then version= without a newline):\n%s", i, conf)
	}
	if e.n == 1 && (servers != 0 || !strings.HasSuffix(conf, "\n")) {
		t.Errorf("standalone conf has a membership block:\n%s", conf)
	}
}

// ---- failover ----

func confFailover(t *testing.T, e *confEnv) {
	r := dialRecorder(t, e.c.Servers())
	sid := r.SessionID()
	from := slices.Index(e.c.Servers(), r.Server())
	if from < 0 {
		t.Fatalf("connected to %s, not a member", r.Server())
	}
	mustCreate(t, r.Conn, "/failover", nil, 0)
	mustCreate(t, r.Conn, "/failover/eph", []byte("e"), zk.FlagEphemeral)
	mustCreate(t, r.Conn, "/failover/data", []byte("0"), 0)
	_, _, dch, err := r.GetW("/failover/data")
	must(t, "getW", err)
	ok, _, xch, err := r.ExistsW("/failover/later")
	if err != nil || ok {
		t.Fatalf("existsW: %v %v", ok, err)
	}
	_, _, cch, err := r.ChildrenW("/failover")
	must(t, "childrenW", err)

	other := (from + 1) % e.n
	w := e.client(t, other)
	// Losing one member of three keeps the quorum.
	e.c.Stop(from)
	e.c.waitLeader()
	retry(t, "set /failover/data", func() error {
		_, err := w.Set("/failover/data", []byte("1"), -1)
		return err
	})
	retry(t, "create /failover/later", func() error {
		_, err := w.Create("/failover/later", nil, 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
	testkit.WaitFor(t, 20*time.Second, "the client to reconnect to a surviving member", func() bool {
		return r.State() == zk.StateHasSession && r.Server() != e.addr(from)
	})
	eq(t, "session id after reconnecting", r.SessionID(), sid)
	// Watches carried over by setWatches fire for changes made while or
	// after the client moved.
	waitEvent(t, dch, zk.EventNodeDataChanged, "/failover/data")
	waitEvent(t, xch, zk.EventNodeCreated, "/failover/later")
	waitEvent(t, cch, zk.EventNodeChildrenChanged, "/failover")
	// Its ephemeral survived.
	syncRead(t, w, "/failover")
	st := mustStat(t, w, "/failover/eph")
	eq(t, "ephemeral owner after failover", st.EphemeralOwner, sid)
	data, _, err := r.Get("/failover/data")
	if err != nil || string(data) != "1" {
		t.Errorf("get through the moved session: %q %v", data, err)
	}
	// New watches work on the new member too.
	_, _, dch, err = r.GetW("/failover/data")
	must(t, "getW", err)
	_, err = w.Set("/failover/data", []byte("2"), -1)
	must(t, "set", err)
	waitEvent(t, dch, zk.EventNodeDataChanged, "/failover/data")

	r.Close()
	syncRead(t, w, "/failover")
	testkit.WaitFor(t, 10*time.Second, "the ephemeral to go with its session", func() bool {
		ok, _, err := w.Exists("/failover/eph")
		return err == nil && !ok
	})
	e.c.Restart(t, from)
	e.c.waitLeader()
}
