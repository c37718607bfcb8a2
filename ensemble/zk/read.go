package zk

import (
	"errors"
	"strings"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// WatchKind is the kind of a watch a session holds on a path.
type WatchKind uint8

// Watch kinds.
const (
	WatchData       WatchKind = iota // getData, or exists on a node that exists
	WatchExist                       // exists on a node that does not exist
	WatchChild                       // getChildren
	WatchPersistent                  // addWatch PERSISTENT
	WatchRecursive                   // addWatch PERSISTENT_RECURSIVE
	NumWatchKinds
)

// WatchReg is a watch a read sets.
type WatchReg struct {
	Kind WatchKind
	Path string
}

// Result is what a read leaves for the member, to be done under the same
// view of the tree as the read, in this order: register Watches, send
// Fires as notifications, then send Frame. So no change can fall between
// the read and its watches, and a client that arms a watch when the reply
// arrives has it before any notification for it.
type Result struct {
	Frame   []byte
	Watches []WatchReg
	// Fires are the notifications setWatches sends at once, for changes
	// the client missed while it was away.
	Fires []wire.WatcherEvent
	// Unwatch is set for checkWatches and removeWatches, whose reply
	// depends on the watches the member holds: Frame is nil then, and
	// Unwatch.Reply gives it.
	Unwatch *Unwatch
	// TooLarge: the reply would have passed MaxReply; Frame says
	// ErrReplyTooLarge and no watch was set.
	TooLarge bool
}

// Reset empties r for another read, keeping its slices' storage.
func (r *Result) Reset() {
	clear(r.Watches)
	clear(r.Fires)
	*r = Result{Watches: r.Watches[:0], Fires: r.Fires[:0]}
}

// Unwatch is a checkWatches or removeWatches: the watch kinds it names on
// Path.
type Unwatch struct {
	Path   string
	Kinds  []WatchKind
	Remove bool // removeWatches; checkWatches only asks
	xid    int32
	zxid   int64
}

// Reply answers the request, given whether the session holds any of the
// watches named: NoWatcher when it holds none.
func (u *Unwatch) Reply(found bool) []byte {
	if !found {
		return ErrorReply(u.xid, u.zxid, wire.ErrNoWatcher)
	}
	return OKReply(u.xid, u.zxid)
}

// Watcher types of checkWatches and removeWatches, as watch kinds.
var (
	unwatchChildren = []WatchKind{WatchChild}
	unwatchData     = []WatchKind{WatchData, WatchExist}
	unwatchAny      = []WatchKind{WatchChild, WatchData, WatchExist, WatchPersistent, WatchRecursive}
)

// Read runs a read request of session s against t, whose last applied zxid
// is zxid, and fills res (reset first). The caller holds t still for the
// read and for acting on res.
func Read(t *tree.Tree, s Session, req *Request, zxid int64, res *Result) {
	res.Reset()
	xid := req.Xid
	switch req.Op {
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2:
		res.Frame, res.TooLarge = readNode(t, s, req, zxid, res)
		if res.TooLarge {
			// The client gets no children, so no watch on them either.
			res.Watches = res.Watches[:0]
		}
	case wire.OpGetACL, wire.OpGetAllChildrenNumber, wire.OpGetEphemerals:
		res.Frame = readPath(t, s, req, zxid)
	case wire.OpWhoAmI:
		res.Frame = reply(xid, zxid, func(e *wire.Encoder) wire.Code {
			r := whoAmI(s.Auth)
			r.Encode(e)
			return wire.OK
		})
	case wire.OpSetWatches, wire.OpSetWatches2:
		setWatches(t, s, req.Watches, zxid, res)
		res.Frame = OKReply(xid, zxid)
	case wire.OpAddWatch:
		res.Frame = addWatch(req, zxid, res)
	case wire.OpCheckWatches, wire.OpRemoveWatches:
		var kinds []WatchKind
		switch req.Mode {
		case wire.WatcherChildren:
			kinds = unwatchChildren
		case wire.WatcherData:
			kinds = unwatchData
		case wire.WatcherAny:
			kinds = unwatchAny
		default:
			res.Frame = ErrorReply(xid, zxid, wire.ErrMarshallingError)
			return
		}
		res.Unwatch = &Unwatch{Path: req.Path, Kinds: kinds, Remove: req.Op == wire.OpRemoveWatches, xid: xid, zxid: zxid}
	case wire.OpMultiRead:
		res.Frame, res.TooLarge = multiRead(t, s, req, zxid)
	default:
		res.Frame = ErrorReply(xid, zxid, wire.ErrUnimplemented)
	}
}

// Reads, sync and addWatch take their path as it comes, as ZooKeeper does:
// it validates the paths of writes only, so a path it would refuse to
// create simply names no node (NONODE; a watch on it never fires), and the
// empty path names the root.

// readNode runs exists, getData and getChildren(2), and sets their watches.
func readNode(t *tree.Tree, s Session, req *Request, zxid int64, res *Result) ([]byte, bool) {
	watch := func(k WatchKind) {
		if req.Watch {
			res.Watches = append(res.Watches, WatchReg{Kind: k, Path: req.Path})
		}
	}
	return boundedReply(req.Xid, zxid, func(e *wire.Encoder) wire.Code {
		switch req.Op {
		case wire.OpExists:
			// exists checks no ACL and sets a watch whether or not the node
			// is there: on its data if it is, on its creation if not. Of
			// all reads, only exists refuses a path with a NUL in it.
			if strings.IndexByte(req.Path, 0) >= 0 {
				return wire.ErrBadArguments
			}
			st, err := t.Exists(req.Path)
			switch {
			case err == nil:
				watch(WatchData)
			case errors.Is(err, tree.ErrNoNode):
				watch(WatchExist)
			}
			if err != nil {
				return CodeOf(err)
			}
			s := StatOf(st)
			s.Encode(e)
		case wire.OpGetData:
			data, st, err := t.Get(req.Path, s.Auth)
			if err != nil {
				return CodeOf(err)
			}
			watch(WatchData)
			(&wire.GetDataResponse{Data: data, Stat: StatOf(st)}).Encode(e)
		case wire.OpGetChildren, wire.OpGetChildren2:
			kids, st, err := t.Children(req.Path, s.Auth)
			if err != nil {
				return CodeOf(err)
			}
			watch(WatchChild)
			if kids == nil {
				kids = []string{}
			}
			if req.Op == wire.OpGetChildren {
				(&wire.GetChildrenResponse{Children: kids}).Encode(e)
			} else {
				(&wire.GetChildren2Response{Children: kids, Stat: StatOf(st)}).Encode(e)
			}
		}
		return wire.OK
	})
}

// readPath runs getACL, getAllChildrenNumber and getEphemerals.
func readPath(t *tree.Tree, s Session, req *Request, zxid int64) []byte {
	// getEphemerals takes a prefix, not a path: an empty one means every
	// ephemeral.
	return reply(req.Xid, zxid, func(e *wire.Encoder) wire.Code {
		switch req.Op {
		case wire.OpGetACL:
			acl, st, err := t.GetACL(req.Path, s.Auth)
			if err != nil {
				return CodeOf(err)
			}
			(&wire.GetACLResponse{ACL: ACLsOf(acl), Stat: StatOf(st)}).Encode(e)
		case wire.OpGetAllChildrenNumber:
			if err := t.CheckACL(req.Path, tree.PermRead, s.Auth); err != nil {
				return CodeOf(err)
			}
			n, err := t.AllChildrenNumber(req.Path)
			if err != nil {
				return CodeOf(err)
			}
			(&wire.GetAllChildrenNumberResponse{TotalNumber: int32(n)}).Encode(e)
		case wire.OpGetEphemerals:
			eph := t.Ephemerals(s.ID, req.Path)
			if eph == nil {
				eph = []string{}
			}
			(&wire.GetEphemeralsResponse{Ephemerals: eph}).Encode(e)
		}
		return wire.OK
	})
}

// multiRead runs a multiRead: each op answers on its own, as ZooKeeper
// does. An op that is no read ends it: ZooKeeper fails to process it
// (MarshallingError) and still sends the results of the reads before it.
// Results are encoded as they are read, so that a reply passing MaxReply
// stops there, holding no more than one op's result besides the encoded
// bytes; it is answered ErrReplyTooLarge alone.
func multiRead(t *tree.Tree, s Session, req *Request, zxid int64) ([]byte, bool) {
	ops, code := req.Ops, wire.OK
	for i, o := range ops {
		if o.Type != wire.OpGetData && o.Type != wire.OpGetChildren {
			ops, code = ops[:i], wire.ErrMarshallingError
			break
		}
	}
	e := wire.NewFrameEncoder(make([]byte, 0, 128))
	e.Limit(MaxReply)
	(&wire.ReplyHeader{Xid: req.Xid, Zxid: zxid, Err: code}).Encode(e)
	for _, o := range ops {
		if e.Over() {
			break
		}
		var r wire.MultiResult
		switch o.Type {
		case wire.OpGetData:
			data, st, err := t.Get(o.Path, s.Auth)
			r = wire.MultiResult{Type: o.Type, Data: data, Stat: StatOf(st)}
			if err != nil {
				r = wire.MultiResult{Type: wire.OpError, Err: CodeOf(err)}
			}
		case wire.OpGetChildren:
			kids, _, err := t.Children(o.Path, s.Auth)
			r = wire.MultiResult{Type: o.Type, Children: kids}
			if err != nil {
				r = wire.MultiResult{Type: wire.OpError, Err: CodeOf(err)}
			}
		}
		r.Encode(e)
	}
	wire.EncodeMultiEnd(e)
	if e.Over() {
		// A fresh frame: the encoder's storage is MaxReply large.
		return header(req.Xid, zxid, ErrReplyTooLarge), true
	}
	return e.Frame(), false
}

// addWatch sets a persistent or persistent recursive watch.
func addWatch(req *Request, zxid int64, res *Result) []byte {
	kind := WatchPersistent
	switch req.Mode {
	case wire.AddWatchPersistent:
	case wire.AddWatchPersistentRecursive:
		kind = WatchRecursive
	default:
		// ZooKeeper fails to read such a request: MarshallingError.
		return ErrorReply(req.Xid, zxid, wire.ErrMarshallingError)
	}
	res.Watches = append(res.Watches, WatchReg{Kind: kind, Path: req.Path})
	// ZooKeeper answers addWatch with an ErrorResponse body of 0; the Java
	// client reads it and fails without it.
	return reply(req.Xid, zxid, func(e *wire.Encoder) wire.Code {
		(&wire.ErrorResponse{}).Encode(e)
		return wire.OK
	})
}

// setWatches re-registers a reconnecting client's watches. A change the
// client missed (newer than RelativeZxid, the last zxid it saw) fires at
// once instead, if the session may read the node (for a child watch, the
// node whose children changed); otherwise the watch is used up silently,
// like any one-shot watch fired by a change the session may not read.
// ZooKeeper delivers these missed-change events without an ACL check. A
// deletion fires unchecked, the node's ACL being gone with it: the session
// named the path itself, and exists (which checks no ACL) would tell it
// the same.
func setWatches(t *tree.Tree, s Session, sw *wire.SetWatches2, zxid int64, res *Result) {
	rel := sw.RelativeZxid
	fire := func(typ int32, path string) {
		if typ != wire.EventNodeDeleted && t.CheckACL(path, tree.PermRead, s.Auth) != nil {
			return
		}
		res.Fires = append(res.Fires, wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: path})
	}
	watch := func(k WatchKind, path string) {
		res.Watches = append(res.Watches, WatchReg{Kind: k, Path: path})
	}
	// A data or child watch fires when the node is gone or changed since
	// the client last saw it.
	changed := func(paths []string, typ int32, k WatchKind, zxidOf func(tree.Stat) int64) {
		for _, p := range paths {
			st, err := t.Exists(p)
			switch {
			case err != nil:
				fire(wire.EventNodeDeleted, p)
			case zxidOf(st) > rel:
				fire(typ, p)
			default:
				watch(k, p)
			}
		}
	}
	changed(sw.DataWatches, wire.EventNodeDataChanged, WatchData, func(st tree.Stat) int64 { return st.Mzxid })
	for _, p := range sw.ExistWatches {
		if _, err := t.Exists(p); err == nil {
			fire(wire.EventNodeCreated, p)
		} else {
			watch(WatchExist, p)
		}
	}
	changed(sw.ChildWatches, wire.EventNodeChildrenChanged, WatchChild, func(st tree.Stat) int64 { return st.Pzxid })
	for _, p := range sw.PersistentWatches {
		watch(WatchPersistent, p)
	}
	for _, p := range sw.PersistentRecursiveWatches {
		watch(WatchRecursive, p)
	}
}

// The one-shot watch kinds each event type fires (and uses up).
var (
	oneShotData  = []WatchKind{WatchData, WatchExist}
	oneShotAll   = []WatchKind{WatchData, WatchExist, WatchChild}
	oneShotChild = []WatchKind{WatchChild}
)

// Fires says what a change event of type ev means to watches: the
// notification's type, the one-shot kinds on the path it fires and uses up,
// and whether recursive watches on the path and above it see it (they see
// every change below them except child-list changes, which the creation and
// deletion events already describe). Persistent watches on the path see
// every event. ok is false for an event no watch sees.
func Fires(ev tree.EventType) (typ int32, oneShot []WatchKind, recursive, ok bool) {
	switch ev {
	case tree.EventCreated:
		return wire.EventNodeCreated, oneShotData, true, true
	case tree.EventDeleted:
		return wire.EventNodeDeleted, oneShotAll, true, true
	case tree.EventDataChanged:
		return wire.EventNodeDataChanged, oneShotData, true, true
	case tree.EventChildrenChanged:
		return wire.EventNodeChildrenChanged, oneShotChild, false, true
	}
	return 0, nil, false, false
}
