package ensemble

// Raw-wire tests of the requests go-zookeeper cannot send: persistent and
// recursive watches (addWatch), setWatches2, checkWatches/removeWatches,
// getEphemerals, getAllChildrenNumber, whoAmI, multiRead, createContainer
// and create2 replies, createTTL, reconfig and a bare check. Each case runs
// against a 1- and a 3-member ensemble; in the 3-member one the watching
// client and the writer sit on different members.
//
// Expected behaviour is ZooKeeper 3.8's (checked against ZooKeeper's sources and a real 3.8 server).
// TestExtraOpsReference runs the same cases against a real ZooKeeper
// (COORDRUN_REFERENCE_ZK=host:port), which is how the expectations were
// checked; the deliberate deviations from 3.8.0 are noted at the cases.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/go-zookeeper/zk"
)

type extraEnv struct {
	*confEnv
	root string // prefix of every path a case uses ("" on a fresh ensemble)
}

func (e *extraEnv) path(p string) string { return e.root + p }

type extraCase struct {
	name string
	f    func(t *testing.T, e *extraEnv)
}

var extraCases = []extraCase{
	{"AddWatchPersistent", extraPersistent},
	{"AddWatchPersistentRecursive", extraRecursive},
	{"SetWatches2", extraSetWatches2},
	{"CheckAndRemoveWatches", extraCheckRemove},
	{"InvalidWatchModes", extraInvalidModes},
	{"GetEphemerals", extraEphemerals},
	{"GetAllChildrenNumber", extraAllChildren},
	{"WhoAmI", extraWhoAmI},
	{"MultiRead", extraMultiRead},
	{"CreateContainerAndCreate2Stat", extraCreateStat},
	{"CreateTTLUnimplemented", extraCreateTTL},
	{"ReconfigUnknownMember", extraReconfig},
	{"CheckOutsideMulti", extraCheck},
	{"ConfigNodeData", extraConfigNode},
}

func TestExtraOps(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
			runExtra(t, &extraEnv{confEnv: &confEnv{c: startCluster(t, n, withSuper), n: n}})
		})
	}
}

// TestExtraOpsReference runs the cases against an external ZooKeeper, e.g.
// Debian's 3.8 started with
//
//	java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain 21810 /tmp/zkdata
//
// and COORDRUN_REFERENCE_ZK=127.0.0.1:21810. Paths live under a fresh
// prefix. CheckOutsideMulti fails there by design: 3.8.0 never answers a
// successful bare check (an NPE on the server).
func TestExtraOpsReference(t *testing.T) {
	addr := os.Getenv("COORDRUN_REFERENCE_ZK")
	if addr == "" {
		t.Skip("COORDRUN_REFERENCE_ZK not set")
	}
	e := &extraEnv{
		confEnv: &confEnv{c: &cluster{t: t, cfgs: []Config{{ClientAddr: addr}}}, n: 1},
		root:    fmt.Sprintf("/extra-%d", time.Now().UnixNano()),
	}
	w := dialW(t, addr)
	if code := w.create(e.root, nil, 0); code != wire.OK {
		t.Fatalf("create %s: %v", e.root, code)
	}
	runExtra(t, e)
}

func runExtra(t *testing.T, e *extraEnv) {
	// First, alone: counts the whole tree, so nothing may write meanwhile.
	t.Run("GetAllChildrenNumberRoot", func(t *testing.T) { extraAllChildrenRoot(t, e) })
	for _, tc := range extraCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, e)
		})
	}
}

// ---- a raw client that records notifications ----

// wclient is a raw session whose reader goroutine records every watch
// notification, so a case can ask for the exact events a connection got.
// Requests are sent one at a time by the test goroutine.
type wclient struct {
	t       testing.TB
	rc      *rawClient
	wmu     sync.Mutex
	xid     int32
	replies chan wreply
	dead    chan struct{} // closed when the reader ends
	stop    chan struct{}
	wg      sync.WaitGroup

	mu       sync.Mutex
	evs      []wire.WatcherEvent
	lastZxid atomic.Int64
}

type wreply struct {
	h    wire.ReplyHeader
	body []byte
}

// dialW opens a new session on addr.
func dialW(t testing.TB, addr string) *wclient {
	t.Helper()
	return startW(t, rawSession(t, addr, confSessionTimeout))
}

// resume opens a new connection for w's session on addr, as a client does
// after losing its connection; w is closed first.
func (w *wclient) resume(t testing.TB, addr string) *wclient {
	t.Helper()
	w.close()
	req := wire.ConnectRequest{
		LastZxidSeen: w.lastZxid.Load(),
		Timeout:      w.rc.resp.Timeout,
		SessionID:    w.rc.resp.SessionID,
		Passwd:       w.rc.resp.Passwd,
	}
	rc, ok := rawHandshake(t, addr, req)
	if !ok || rc.resp.SessionID != req.SessionID {
		t.Fatalf("resuming session %#x on %s: ok=%v resp=%+v", req.SessionID, addr, ok, rc.resp)
	}
	w2 := startW(t, rc)
	w2.lastZxid.Store(req.LastZxidSeen)
	return w2
}

func startW(t testing.TB, rc *rawClient) *wclient {
	w := &wclient{t: t, rc: rc, replies: make(chan wreply, 16), dead: make(chan struct{}), stop: make(chan struct{})}
	w.wg.Add(2)
	go w.readLoop()
	go w.pingLoop(time.Duration(rc.resp.Timeout) * time.Millisecond / 3)
	t.Cleanup(w.close)
	return w
}

func (w *wclient) close() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.rc.nc.Close()
	w.wg.Wait()
}

func (w *wclient) readLoop() {
	defer w.wg.Done()
	defer close(w.dead)
	for {
		frame, err := wire.ReadFrame(w.rc.r, nil, rawMaxFrame)
		if err != nil {
			return
		}
		d := wire.NewDecoder(frame)
		var h wire.ReplyHeader
		if h.Decode(d) != nil {
			return
		}
		switch h.Xid {
		case wire.XidPing:
		case wire.XidNotification:
			var ev wire.WatcherEvent
			if ev.Decode(d) != nil {
				return
			}
			w.mu.Lock()
			w.evs = append(w.evs, ev)
			w.mu.Unlock()
		default:
			if h.Zxid > 0 {
				w.lastZxid.Store(h.Zxid)
			}
			select {
			case w.replies <- wreply{h, frame[len(frame)-d.Remaining():]}:
			case <-w.stop:
				return
			}
		}
	}
}

func (w *wclient) pingLoop(every time.Duration) {
	defer w.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			w.write(pingFrame)
		}
	}
}

func (w *wclient) write(frame []byte) bool {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.rc.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := w.rc.nc.Write(frame)
	return err == nil
}

// callXid sends one request with the given xid and returns its reply.
func (w *wclient) callXid(xid, op int32, req wire.Record) wreply {
	w.t.Helper()
	e := wire.NewFrameEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if req != nil {
		req.Encode(e)
	}
	if !w.write(e.Frame()) {
		w.t.Fatalf("op %s: write failed", wire.OpName(op))
	}
	var r wreply
	select {
	case r = <-w.replies:
	case <-w.dead:
		select {
		case r = <-w.replies:
		default:
			w.t.Fatalf("op %s: connection closed without a reply", wire.OpName(op))
		}
	case <-time.After(10 * time.Second):
		w.t.Fatalf("op %s: no reply within 10s", wire.OpName(op))
	}
	if r.h.Xid != xid {
		w.t.Fatalf("op %s: reply for xid %d, want %d", wire.OpName(op), r.h.Xid, xid)
	}
	return r
}

func (w *wclient) call(op int32, req wire.Record) wreply {
	w.t.Helper()
	w.xid++
	return w.callXid(w.xid, op, req)
}

// code sends a request and returns only its error code.
func (w *wclient) code(op int32, req wire.Record) wire.Code {
	w.t.Helper()
	return w.call(op, req).h.Err
}

// ok sends a request that must succeed and decodes its reply, which must
// be exactly one resp record (no trailing bytes).
func (w *wclient) ok(op int32, req, resp wire.Record) {
	w.t.Helper()
	r := w.call(op, req)
	if r.h.Err != wire.OK {
		w.t.Fatalf("op %s %+v: %v", wire.OpName(op), req, r.h.Err)
	}
	decodeExact(w.t, wire.OpName(op), r.body, resp)
}

func decodeExact(t testing.TB, what string, body []byte, resp wire.Record) {
	t.Helper()
	if resp == nil {
		if len(body) != 0 {
			t.Errorf("%s: reply body %x, want none", what, body)
		}
		return
	}
	d := wire.NewDecoder(body)
	if err := resp.Decode(d); err != nil {
		t.Fatalf("%s: bad reply body %x: %v", what, body, err)
	}
	if d.Remaining() != 0 {
		t.Errorf("%s: %d bytes after the reply record (body %x)", what, d.Remaining(), body)
	}
}

func (w *wclient) create(path string, data []byte, flags int32) wire.Code {
	w.t.Helper()
	return w.code(wire.OpCreate, &wire.CreateRequest{Path: path, Data: data, ACL: openACL, Flags: flags})
}

func (w *wclient) mustCreate(path string, data []byte, flags int32) {
	w.t.Helper()
	if code := w.create(path, data, flags); code != wire.OK {
		w.t.Fatalf("create %s: %v", path, code)
	}
}

func (w *wclient) addWatch(path string, mode int32) {
	w.t.Helper()
	r := w.call(wire.OpAddWatch, &wire.AddWatchRequest{Path: path, Mode: mode})
	if r.h.Err != wire.OK {
		w.t.Fatalf("addWatch %s mode %d: %v", path, mode, r.h.Err)
	}
	// ZooKeeper answers with an ErrorResponse{0}; the Java client decodes
	// exactly that record and drops the connection when it is missing.
	if !bytes.Equal(r.body, []byte{0, 0, 0, 0}) {
		w.t.Errorf("addWatch %s reply body %x, want 00000000 (ErrorResponse{0})", path, r.body)
	}
}

func (w *wclient) watches(op int32, path string, typ int32) wire.Code {
	w.t.Helper()
	r := w.call(op, &wire.RemoveWatchesRequest{Path: path, Type: typ})
	if len(r.body) != 0 {
		w.t.Errorf("%s %s type %d: reply body %x, want none", wire.OpName(op), path, typ, r.body)
	}
	return r.h.Err
}

// sync is a barrier: its reply comes after the notifications of every
// write acknowledged (to anyone) before it was sent.
func (w *wclient) sync() {
	w.t.Helper()
	var sr wire.SyncResponse
	w.ok(wire.OpSync, &wire.PathRequest{Path: "/"}, &sr)
}

func (w *wclient) takeEvents() []wire.WatcherEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.evs
	w.evs = nil
	return evs
}

func ev(typ int32, path string) wire.WatcherEvent {
	return wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: path}
}

// expectEvents waits for the barrier and checks that exactly want arrived
// since the last check, in order.
func (w *wclient) expectEvents(what string, want ...wire.WatcherEvent) {
	w.t.Helper()
	w.sync()
	got := w.takeEvents()
	if !slices.Equal(got, want) {
		w.t.Errorf("%s: events\n got %s\nwant %s", what, fmtEvents(got), fmtEvents(want))
	}
}

func fmtEvents(evs []wire.WatcherEvent) string {
	names := map[int32]string{1: "Created", 2: "Deleted", 3: "DataChanged", 4: "ChildrenChanged"}
	s := "["
	for i, e := range evs {
		if i > 0 {
			s += " "
		}
		n := names[e.Type]
		if n == "" {
			n = fmt.Sprint(e.Type)
		}
		s += fmt.Sprintf("%s(%s,state %d)", n, e.Path, e.State)
	}
	return s + "]"
}

// ---- cases ----

// A PERSISTENT watch fires for its own path every time, including child
// list changes, and never for anything below it.
func extraPersistent(t *testing.T, e *extraEnv) {
	p := e.path("/pw")
	w, wr := dialW(t, e.addr(0)), e.client(t, 1)
	w.addWatch(p, wire.AddWatchPersistent) // before the node exists
	w.expectEvents("after addWatch")

	mustCreate(t, wr, p, []byte("a"), 0)
	_, err := wr.Set(p, []byte("b"), -1)
	must(t, "set", err)
	_, err = wr.Set(p, []byte("c"), -1)
	must(t, "set again", err)
	mustCreate(t, wr, p+"/c", nil, 0)
	_, err = wr.Set(p+"/c", []byte("x"), -1)
	must(t, "set child", err)
	mustCreate(t, wr, p+"/c/g", nil, 0)
	must(t, "delete grandchild", wr.Delete(p+"/c/g", -1))
	must(t, "delete child", wr.Delete(p+"/c", -1))
	must(t, "delete", wr.Delete(p, -1))
	mustCreate(t, wr, p, nil, 0)
	_, err = wr.Set(p, []byte("d"), -1)
	must(t, "set after re-create", err)
	w.expectEvents("persistent watch",
		ev(wire.EventNodeCreated, p),
		ev(wire.EventNodeDataChanged, p),
		ev(wire.EventNodeDataChanged, p),
		ev(wire.EventNodeChildrenChanged, p),
		ev(wire.EventNodeChildrenChanged, p),
		ev(wire.EventNodeDeleted, p),
		ev(wire.EventNodeCreated, p),
		ev(wire.EventNodeDataChanged, p),
	)

	// The connection's own writes notify it too, before their replies.
	_, err = wr.Set(p, []byte("e"), -1)
	must(t, "set", err)
	var st wire.StatResponse
	w.ok(wire.OpSetData, &wire.SetDataRequest{Path: p, Data: []byte("f"), Version: -1}, &st)
	w.expectEvents("own write", ev(wire.EventNodeDataChanged, p), ev(wire.EventNodeDataChanged, p))
}

// A PERSISTENT_RECURSIVE watch fires for its path and every descendant,
// never with NodeChildrenChanged, and not for a sibling sharing its prefix.
func extraRecursive(t *testing.T, e *extraEnv) {
	p := e.path("/rw")
	w, wr := dialW(t, e.addr(0)), e.client(t, 1)
	w.addWatch(p, wire.AddWatchPersistentRecursive)

	mustCreate(t, wr, p, nil, 0)
	mustCreate(t, wr, p+"/a", nil, 0)
	mustCreate(t, wr, p+"/a/b", nil, 0)
	_, err := wr.Set(p+"/a/b", []byte("x"), -1)
	must(t, "set a/b", err)
	must(t, "delete a/b", wr.Delete(p+"/a/b", -1))
	_, err = wr.Set(p, []byte("y"), -1)
	must(t, "set", err)
	mustCreate(t, wr, p+"x", nil, 0) // a sibling, not a descendant
	_, err = wr.Set(p+"x", []byte("z"), -1)
	must(t, "set sibling", err)
	mustCreate(t, wr, p+"/a/b", nil, 0) // again: not one-shot
	must(t, "delete a/b", wr.Delete(p+"/a/b", -1))
	must(t, "delete a", wr.Delete(p+"/a", -1))
	must(t, "delete", wr.Delete(p, -1))
	w.expectEvents("recursive watch",
		ev(wire.EventNodeCreated, p),
		ev(wire.EventNodeCreated, p+"/a"),
		ev(wire.EventNodeCreated, p+"/a/b"),
		ev(wire.EventNodeDataChanged, p+"/a/b"),
		ev(wire.EventNodeDeleted, p+"/a/b"),
		ev(wire.EventNodeDataChanged, p),
		ev(wire.EventNodeCreated, p+"/a/b"),
		ev(wire.EventNodeDeleted, p+"/a/b"),
		ev(wire.EventNodeDeleted, p+"/a"),
		ev(wire.EventNodeDeleted, p),
	)
}

// setWatches2 on a resumed connection re-registers persistent and
// recursive watches along with the one-shot ones; a one-shot watch whose
// node changed since relativeZxid fires at once, before the reply.
func extraSetWatches2(t *testing.T, e *extraEnv) {
	p, pr, pd, pc, pe := e.path("/sw2"), e.path("/sw2r"), e.path("/sw2d"), e.path("/sw2c"), e.path("/sw2e")
	wr := e.client(t, 1)
	mustCreate(t, wr, p, nil, 0)
	mustCreate(t, wr, pd, nil, 0)
	mustCreate(t, wr, pc, nil, 0)

	w := dialW(t, e.addr(0))
	w.sync() // learn the current zxid
	rel := w.lastZxid.Load()
	_, err := wr.Set(pc, []byte("missed"), -1) // after rel: fires at once
	must(t, "set", err)
	syncRead(t, wr, "/") // member 1 has everything the session saw

	w2 := w.resume(t, e.addr(1))
	r := w2.callXid(wire.XidSetWatches, wire.OpSetWatches2, &wire.SetWatches2{
		RelativeZxid:               rel,
		DataWatches:                []string{pd, pc},
		ExistWatches:               []string{pe},
		ChildWatches:               []string{}, // ZooKeeper fails on a null vector (NPE: MarshallingError)
		PersistentWatches:          []string{p},
		PersistentRecursiveWatches: []string{pr},
	})
	eq(t, "setWatches2 err", r.h.Err, wire.OK)
	decodeExact(t, "setWatches2", r.body, nil)
	if got := w2.takeEvents(); !slices.Equal(got, []wire.WatcherEvent{ev(wire.EventNodeDataChanged, pc)}) {
		t.Errorf("events before the setWatches2 reply: %s, want [DataChanged(%s)]", fmtEvents(got), pc)
	}

	for i := 0; i < 2; i++ {
		_, err = wr.Set(p, []byte{byte(i)}, -1)
		must(t, "set persistent", err)
	}
	mustCreate(t, wr, pr, nil, 0)
	mustCreate(t, wr, pr+"/x", nil, 0)
	_, err = wr.Set(pd, []byte("1"), -1)
	must(t, "set data-watched", err)
	_, err = wr.Set(pd, []byte("2"), -1) // one-shot: already consumed
	must(t, "set data-watched", err)
	_, err = wr.Set(pc, []byte("again"), -1) // fired at setWatches2: gone
	must(t, "set", err)
	mustCreate(t, wr, pe, nil, 0)
	mustCreate(t, wr, p+"/kid", nil, 0)
	w2.expectEvents("after setWatches2",
		ev(wire.EventNodeDataChanged, p),
		ev(wire.EventNodeDataChanged, p),
		ev(wire.EventNodeCreated, pr),
		ev(wire.EventNodeCreated, pr+"/x"),
		ev(wire.EventNodeDataChanged, pd),
		ev(wire.EventNodeCreated, pe),
		ev(wire.EventNodeChildrenChanged, p),
	)
}

// checkWatches (17) only tests; removeWatches (18) removes, after which
// the change the watch was for notifies nothing. Both answer NoWatcher when
// the connection has no such watch, and neither has a reply body.
func extraCheckRemove(t *testing.T, e *extraEnv) {
	p := e.path("/cw")
	wr := e.client(t, 1)
	mustCreate(t, wr, p, []byte("x"), 0)
	w := dialW(t, e.addr(0))
	var gd wire.GetDataResponse
	var gc wire.GetChildrenResponse
	var st wire.StatResponse

	eq(t, "checkWatches without a watch", w.watches(wire.OpCheckWatches, p, wire.WatcherAny), wire.ErrNoWatcher)
	eq(t, "removeWatches without a watch", w.watches(wire.OpRemoveWatches, p, wire.WatcherAny), wire.ErrNoWatcher)

	// A data watch: checking it leaves it in place.
	w.ok(wire.OpGetData, &wire.PathWatchRequest{Path: p, Watch: true}, &gd)
	eq(t, "checkWatches data", w.watches(wire.OpCheckWatches, p, wire.WatcherData), wire.OK)
	eq(t, "checkWatches children (only a data watch)", w.watches(wire.OpCheckWatches, p, wire.WatcherChildren), wire.ErrNoWatcher)
	eq(t, "checkWatches any", w.watches(wire.OpCheckWatches, p, wire.WatcherAny), wire.OK)
	eq(t, "checkWatches data again", w.watches(wire.OpCheckWatches, p, wire.WatcherData), wire.OK)
	_, err := wr.Set(p, []byte("1"), -1)
	must(t, "set", err)
	w.expectEvents("data watch after checkWatches", ev(wire.EventNodeDataChanged, p))
	eq(t, "checkWatches after the watch fired", w.watches(wire.OpCheckWatches, p, wire.WatcherData), wire.ErrNoWatcher)

	// removeWatches of a data watch.
	w.ok(wire.OpGetData, &wire.PathWatchRequest{Path: p, Watch: true}, &gd)
	eq(t, "removeWatches children (only a data watch)", w.watches(wire.OpRemoveWatches, p, wire.WatcherChildren), wire.ErrNoWatcher)
	eq(t, "removeWatches data", w.watches(wire.OpRemoveWatches, p, wire.WatcherData), wire.OK)
	eq(t, "removeWatches data again", w.watches(wire.OpRemoveWatches, p, wire.WatcherData), wire.ErrNoWatcher)
	_, err = wr.Set(p, []byte("2"), -1)
	must(t, "set", err)
	w.expectEvents("after removing the data watch")

	// A child watch.
	w.ok(wire.OpGetChildren, &wire.PathWatchRequest{Path: p, Watch: true}, &gc)
	eq(t, "checkWatches children", w.watches(wire.OpCheckWatches, p, wire.WatcherChildren), wire.OK)
	eq(t, "removeWatches children", w.watches(wire.OpRemoveWatches, p, wire.WatcherChildren), wire.OK)
	mustCreate(t, wr, p+"/c", nil, 0)
	w.expectEvents("after removing the child watch")

	// Both kinds at once, removed with Any.
	w.ok(wire.OpGetData, &wire.PathWatchRequest{Path: p, Watch: true}, &gd)
	w.ok(wire.OpGetChildren, &wire.PathWatchRequest{Path: p, Watch: true}, &gc)
	eq(t, "removeWatches any", w.watches(wire.OpRemoveWatches, p, wire.WatcherAny), wire.OK)
	eq(t, "checkWatches data after remove any", w.watches(wire.OpCheckWatches, p, wire.WatcherData), wire.ErrNoWatcher)
	eq(t, "checkWatches children after remove any", w.watches(wire.OpCheckWatches, p, wire.WatcherChildren), wire.ErrNoWatcher)
	must(t, "delete child", wr.Delete(p+"/c", -1))
	w.expectEvents("after removing both")

	// exists on a missing node leaves a data watch.
	pm := p + "-missing"
	eq(t, "exists missing", w.code(wire.OpExists, &wire.PathWatchRequest{Path: pm, Watch: true}), wire.ErrNoNode)
	eq(t, "checkWatches data on missing node", w.watches(wire.OpCheckWatches, pm, wire.WatcherData), wire.OK)
	eq(t, "removeWatches data on missing node", w.watches(wire.OpRemoveWatches, pm, wire.WatcherData), wire.OK)
	mustCreate(t, wr, pm, nil, 0)
	w.expectEvents("after removing the exists watch")

	// A persistent watch is removed with Any.
	w.addWatch(p, wire.AddWatchPersistent)
	eq(t, "checkWatches any on persistent", w.watches(wire.OpCheckWatches, p, wire.WatcherAny), wire.OK)
	eq(t, "removeWatches any on persistent", w.watches(wire.OpRemoveWatches, p, wire.WatcherAny), wire.OK)
	eq(t, "checkWatches any after removal", w.watches(wire.OpCheckWatches, p, wire.WatcherAny), wire.ErrNoWatcher)
	w.ok(wire.OpSetData, &wire.SetDataRequest{Path: p, Data: []byte("3"), Version: -1}, &st)
	_, err = wr.Set(p, []byte("4"), -1)
	must(t, "set", err)
	w.expectEvents("after removing the persistent watch")

	// Another connection's watch is not this one's to remove. (checkWatches
	// is not asked: 3.8's WatchManager.containsWatcher answers OK when any
	// connection watches the leaf path.)
	other := dialW(t, e.addr(1))
	other.ok(wire.OpGetData, &wire.PathWatchRequest{Path: p, Watch: true}, &gd)
	eq(t, "removeWatches for another session's watch", w.watches(wire.OpRemoveWatches, p, wire.WatcherData), wire.ErrNoWatcher)
	_, err = wr.Set(p, []byte("5"), -1)
	must(t, "set", err)
	other.expectEvents("the other session's watch after a foreign removeWatches", ev(wire.EventNodeDataChanged, p))
	w.expectEvents("no watch of its own")
}

// Invalid addWatch modes and watcher types: ZooKeeper 3.8 turns the
// IllegalArgumentException / RuntimeException into MarshallingError (-5)
// and keeps the connection.
func extraInvalidModes(t *testing.T, e *extraEnv) {
	p := e.path("/badmode")
	w := dialW(t, e.addr(0))
	w.mustCreate(p, nil, 0)
	eq(t, "addWatch mode 2", w.code(wire.OpAddWatch, &wire.AddWatchRequest{Path: p, Mode: 2}), wire.ErrMarshallingError)
	eq(t, "checkWatches type 7", w.code(wire.OpCheckWatches, &wire.RemoveWatchesRequest{Path: p, Type: 7}), wire.ErrMarshallingError)
	eq(t, "removeWatches type 0", w.code(wire.OpRemoveWatches, &wire.RemoveWatchesRequest{Path: p, Type: 0}), wire.ErrMarshallingError)
	w.sync() // still connected
}

// getEphemerals (103): the calling session's ephemerals whose path starts
// with the prefix (a plain string prefix); blank or "/" selects all.
func extraEphemerals(t *testing.T, e *extraEnv) {
	base := e.path("/eph")
	w := dialW(t, e.addr(0))
	other := e.client(t, 1)
	w.mustCreate(base, nil, 0)
	w.mustCreate(base+"/a", nil, wire.FlagEphemeral)
	w.mustCreate(base+"/b", nil, wire.FlagEphemeral)
	w.mustCreate(base+"/p", nil, 0)
	w.mustCreate(base+"x", nil, wire.FlagEphemeral)
	var cr wire.CreateResponse
	w.ok(wire.OpCreate, &wire.CreateRequest{Path: base + "/s-", ACL: openACL, Flags: wire.FlagEphemeralSequential}, &cr)
	mustCreate(t, other, base+"/o", nil, zk.FlagEphemeral)

	get := func(prefix string) ([]string, wire.Code) {
		t.Helper()
		r := w.call(wire.OpGetEphemerals, &wire.PathRequest{Path: prefix})
		if r.h.Err != wire.OK {
			return nil, r.h.Err
		}
		var resp wire.GetEphemeralsResponse
		decodeExact(t, "getEphemerals", r.body, &resp)
		if resp.Ephemerals == nil {
			t.Errorf("getEphemerals %q: null vector, want a (possibly empty) list", prefix)
		}
		return sortedCopy(resp.Ephemerals), wire.OK
	}
	all := sortedCopy([]string{base + "/a", base + "/b", cr.Path, base + "x"})
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{base + "/", sortedCopy([]string{base + "/a", base + "/b", cr.Path})},
		{base, all},
		{base + "/a", []string{base + "/a"}},
		{base + "/nothing", []string{}},
		{"/", all},
		{"", all},
		{"  ", all},
	} {
		if got, code := get(c.prefix); code != wire.OK || !slices.Equal(got, c.want) {
			t.Errorf("getEphemerals %q = %v (err %v), want %v", c.prefix, got, code, c.want)
		}
	}
}

// getAllChildrenNumber (104) counts all descendants; it needs READ.
func extraAllChildren(t *testing.T, e *extraEnv) {
	base := e.path("/acn")
	w := dialW(t, e.addr(0))
	for _, p := range []string{"", "/a", "/a/b", "/a/b/c", "/d", "/d/e"} {
		w.mustCreate(base+p, nil, 0)
	}
	secret := []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: digestID("u:p")}}}
	w.ok(wire.OpCreate, &wire.CreateRequest{Path: base + "/s", ACL: secret}, &wire.CreateResponse{})
	reader := dialW(t, e.addr(1))
	reader.sync()
	for p, want := range map[string]int32{"": 6, "/a": 2, "/a/b": 1, "/a/b/c": 0, "/d": 1} {
		var r wire.GetAllChildrenNumberResponse
		reader.ok(wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: base + p}, &r)
		eq(t, "getAllChildrenNumber "+base+p, r.TotalNumber, want)
	}
	eq(t, "getAllChildrenNumber missing", reader.code(wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: base + "/nope"}), wire.ErrNoNode)
	eq(t, "getAllChildrenNumber without READ", reader.code(wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: base + "/s"}), wire.ErrNoAuth)
}

// getAllChildrenNumber of "/" counts every node but the root, the system
// nodes /zookeeper, /zookeeper/quota and /zookeeper/config included.
func extraAllChildrenRoot(t *testing.T, e *extraEnv) {
	w := dialW(t, e.addr(0))
	// The only protected nodes the cases create are digest u:p (they
	// linger on a reference server between runs).
	eq(t, "auth", w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "digest", Auth: []byte("u:p")}).h.Err, wire.OK)
	count := 0
	var walk func(p string)
	walk = func(p string) {
		var r wire.GetChildrenResponse
		w.ok(wire.OpGetChildren, &wire.PathWatchRequest{Path: p}, &r)
		for _, k := range r.Children {
			count++
			walk(joinPathTest(p, k))
		}
	}
	walk("/")
	var r wire.GetAllChildrenNumberResponse
	w.ok(wire.OpGetAllChildrenNumber, &wire.PathRequest{Path: "/"}, &r)
	eq(t, "getAllChildrenNumber /", r.TotalNumber, int32(count))
	if e.root == "" {
		eq(t, "getAllChildrenNumber / on a fresh ensemble", r.TotalNumber, int32(3))
	}
}

func joinPathTest(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// whoAmI (107): the ip identity, then each digest user added by auth.
func extraWhoAmI(t *testing.T, e *extraEnv) {
	w := dialW(t, e.addr(0))
	host, _, _ := net.SplitHostPort(w.rc.nc.LocalAddr().String())
	var r wire.WhoAmIResponse
	w.ok(wire.OpWhoAmI, nil, &r)
	if want := []wire.ClientInfo{{AuthScheme: "ip", User: host}}; !slices.Equal(r.ClientInfo, want) {
		t.Errorf("whoAmI = %+v, want %+v", r.ClientInfo, want)
	}
	for _, cred := range []string{"u:p", "v:q"} {
		a := w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "digest", Auth: []byte(cred)})
		eq(t, "auth "+cred, a.h.Err, wire.OK)
	}
	w.ok(wire.OpWhoAmI, nil, &r)
	want := []wire.ClientInfo{{AuthScheme: "ip", User: host}, {AuthScheme: "digest", User: "u"}, {AuthScheme: "digest", User: "v"}}
	if !slices.Equal(r.ClientInfo, want) {
		t.Errorf("whoAmI after auth = %+v, want %+v", r.ClientInfo, want)
	}
}

// multiRead (22): independent reads; a failing one becomes an error
// result in place and the header stays OK.
func extraMultiRead(t *testing.T, e *extraEnv) {
	base := e.path("/mr")
	w := dialW(t, e.addr(0))
	w.mustCreate(base, []byte("d"), 0)
	w.mustCreate(base+"/c1", nil, 0)
	w.mustCreate(base+"/c2", []byte("two"), 0)
	reader := dialW(t, e.addr(1))
	reader.sync()
	var gd wire.GetDataResponse
	reader.ok(wire.OpGetData, &wire.PathWatchRequest{Path: base}, &gd)

	req := &wire.MultiRequest{Ops: []wire.MultiOp{
		{Type: wire.OpGetData, Path: base},
		{Type: wire.OpGetChildren, Path: base},
		{Type: wire.OpGetData, Path: base + "/missing"},
		{Type: wire.OpGetChildren, Path: base + "/c1"},
		{Type: wire.OpGetData, Path: base + "/c2"},
		{Type: wire.OpGetChildren, Path: base + "/missing"},
	}}
	var mr wire.MultiResponse
	reader.ok(wire.OpMultiRead, req, &mr)
	if len(mr.Results) != len(req.Ops) {
		t.Fatalf("multiRead: %d results, want %d: %+v", len(mr.Results), len(req.Ops), mr.Results)
	}
	res := mr.Results
	eq(t, "result 0 type", res[0].Type, wire.OpGetData)
	eq(t, "result 0 err", res[0].Err, wire.OK)
	eq(t, "result 0 data", string(res[0].Data), "d")
	eq(t, "result 0 stat", res[0].Stat, gd.Stat)
	eq(t, "result 1 type", res[1].Type, wire.OpGetChildren)
	eq(t, "result 1 err", res[1].Err, wire.OK)
	if got := sortedCopy(res[1].Children); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Errorf("result 1 children %v", got)
	}
	eq(t, "result 2 type", res[2].Type, wire.OpError)
	eq(t, "result 2 err", res[2].Err, wire.ErrNoNode)
	eq(t, "result 3 type", res[3].Type, wire.OpGetChildren)
	if res[3].Children == nil || len(res[3].Children) != 0 {
		t.Errorf("result 3 (children of a leaf) = %#v, want an empty list (not the null vector)", res[3].Children)
	}
	eq(t, "result 4 type", res[4].Type, wire.OpGetData)
	eq(t, "result 4 data", string(res[4].Data), "two")
	eq(t, "result 4 dataLength", res[4].Stat.DataLength, int32(3))
	eq(t, "result 5 type", res[5].Type, wire.OpError)
	eq(t, "result 5 err", res[5].Err, wire.ErrNoNode)
}

// createContainer (19) and create2 (15) answer with path and Stat.
func extraCreateStat(t *testing.T, e *extraEnv) {
	base := e.path("/cs")
	w := dialW(t, e.addr(0))
	reader := dialW(t, e.addr(1))
	check := func(what string, cr wire.Create2Response, path string, dataLen int32, owner int64) {
		t.Helper()
		eq(t, what+" path", cr.Path, path)
		s := cr.Stat
		if s.Czxid <= 0 || s.Ctime <= 0 {
			t.Errorf("%s stat %+v: no czxid/ctime", what, s)
		}
		eq(t, what+" mzxid", s.Mzxid, s.Czxid)
		eq(t, what+" pzxid", s.Pzxid, s.Czxid)
		eq(t, what+" mtime", s.Mtime, s.Ctime)
		eq(t, what+" version", s.Version, int32(0))
		eq(t, what+" cversion", s.Cversion, int32(0))
		eq(t, what+" dataLength", s.DataLength, dataLen)
		eq(t, what+" numChildren", s.NumChildren, int32(0))
		eq(t, what+" ephemeralOwner", s.EphemeralOwner, owner)
		if cr.Stat.Czxid > w.lastZxid.Load() {
			t.Errorf("%s czxid %d above the reply's zxid %d", what, s.Czxid, w.lastZxid.Load())
		}
		reader.sync()
		var st wire.StatResponse
		reader.ok(wire.OpExists, &wire.PathWatchRequest{Path: path}, &st)
		eq(t, what+" stat as read back", st.Stat, cr.Stat)
	}
	var cr wire.Create2Response
	w.ok(wire.OpCreateContainer, &wire.CreateRequest{Path: base, Data: []byte("box"), ACL: openACL, Flags: wire.FlagContainer}, &cr)
	check("createContainer", cr, base, 3, 0)
	w.ok(wire.OpCreate2, &wire.CreateRequest{Path: base + "/k", Data: []byte("k"), ACL: openACL, Flags: wire.FlagEphemeral}, &cr)
	check("create2 ephemeral", cr, base+"/k", 1, w.rc.resp.SessionID)
	w.ok(wire.OpCreate2, &wire.CreateRequest{Path: base + "/s-", ACL: openACL, Flags: wire.FlagPersistentSequential}, &cr)
	check("create2 sequential", cr, base+"/s-0000000001", 0, 0)
	eq(t, "createContainer twice", w.code(wire.OpCreateContainer, &wire.CreateRequest{Path: base, ACL: openACL, Flags: wire.FlagContainer}), wire.ErrNodeExists)
}

// createTTL (21): TTL nodes are disabled, as on a default ZooKeeper, so
// Unimplemented; nothing is created and the connection stays.
func extraCreateTTL(t *testing.T, e *extraEnv) {
	p := e.path("/ttl")
	w := dialW(t, e.addr(0))
	for _, flags := range []int32{wire.FlagPersistentWithTTL, wire.FlagPersistentSequentialWithTTL} {
		code := w.code(wire.OpCreateTTL, &wire.CreateTTLRequest{Path: p, Data: []byte("x"), ACL: openACL, Flags: flags, TTL: 1000})
		eq(t, fmt.Sprintf("createTTL flags %d", flags), code, wire.ErrUnimplemented)
	}
	eq(t, "exists after createTTL", w.code(wire.OpExists, &wire.PathWatchRequest{Path: p}), wire.ErrNoNode)
}

// reconfigRequest is ZooKeeper's ReconfigRequest (jute), spelled out here
// so that the test relies on nothing but the wire layout.
type reconfigRequest struct {
	joining, leaving, newMembers string
	curConfigID                  int64
}

func (r *reconfigRequest) Encode(e *wire.Encoder) {
	e.String(r.joining)
	e.String(r.leaving)
	e.String(r.newMembers)
	e.Long(r.curConfigID)
}

func (r *reconfigRequest) Decode(d *wire.Decoder) error {
	r.joining, r.leaving, r.newMembers, r.curConfigID = d.String(), d.String(), d.String(), d.Long()
	return d.Err()
}

// reconfig (16) is served to the super user only: another client gets
// NOAUTH (ZooKeeper: RECONFIGDISABLED, its default, or NOAUTH with reconfig
// enabled). For super, removing a server that is no member is refused as
// a bad argument, changes nothing, and the connection stays.
func extraReconfig(t *testing.T, e *extraEnv) {
	w := dialW(t, e.addr(0))
	want := wire.ErrNoAuth
	if e.root != "" {
		want = wire.ErrReconfigDisabled
	}
	eq(t, "reconfig", w.code(wire.OpReconfig, &reconfigRequest{leaving: "99", curConfigID: -1}), want)
	if e.root != "" {
		return
	}
	eq(t, "auth as super", w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "digest", Auth: []byte(testSuperAuth)}).h.Err, wire.OK)
	eq(t, "reconfig as super", w.code(wire.OpReconfig, &reconfigRequest{leaving: "99", curConfigID: -1}), wire.ErrBadArguments)
	w.sync()
}

// check (13) outside a multi: ZooKeeper 3.8.0 answers a failing one with
// its error but never answers a successful one (an NPE on the server);
// here every check must be answered, and the connection must stay usable.
func extraCheck(t *testing.T, e *extraEnv) {
	p := e.path("/chk")
	w := dialW(t, e.addr(0))
	w.mustCreate(p, nil, 0)
	eq(t, "check bad version", w.code(wire.OpCheck, &wire.CheckVersionRequest{Path: p, Version: 3}), wire.ErrBadVersion)
	eq(t, "check missing node", w.code(wire.OpCheck, &wire.CheckVersionRequest{Path: p + "/nope", Version: -1}), wire.ErrNoNode)
	if e.root != "" {
		t.Skip("reference server: ZooKeeper 3.8.0 never answers a successful bare check")
	}
	eq(t, "check right version", w.code(wire.OpCheck, &wire.CheckVersionRequest{Path: p, Version: 0}), wire.OK)
	eq(t, "check any version", w.code(wire.OpCheck, &wire.CheckVersionRequest{Path: p, Version: -1}), wire.OK)
	w.sync()
}

// /zookeeper/config holds the dynamic configuration. Without one (a
// ZooKeeper without reconfig, standalone) its data is an empty buffer,
// never the null one: Curator's EnsembleTracker reads it on every connect
// with new ByteArrayInputStream(data) and logs a NullPointerException on
// null.
func extraConfigNode(t *testing.T, e *extraEnv) {
	w := dialW(t, e.addr(0))
	r := w.call(wire.OpGetData, &wire.PathWatchRequest{Path: "/zookeeper/config", Watch: true})
	if r.h.Err != wire.OK {
		t.Fatalf("getData /zookeeper/config: %v", r.h.Err)
	}
	var gd wire.GetDataResponse
	decodeExact(t, "getData /zookeeper/config", r.body, &gd)
	if gd.Data == nil {
		t.Errorf("/zookeeper/config data is the null buffer (length -1), want a buffer (empty or the config text); body %x", r.body)
	}
	eq(t, "/zookeeper/config dataLength", gd.Stat.DataLength, int32(len(gd.Data)))
}
