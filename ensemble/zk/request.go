package zk

import "github.com/coordrun/coordrun/ensemble/wire"

// Request is one decoded client request. Which fields are set depends on Op,
// as the comments say; the others are zero.
type Request struct {
	Xid     int32
	Op      int32
	Flags   int32 // create*: the create mode
	Version int32 // delete, setData, setACL, check
	// Mode: addWatch's watch mode; checkWatches' and removeWatches'
	// watcher type.
	Mode  int32
	Watch bool // exists, getData, getChildren, getChildren2

	// Path: every request on one node (multis aside), sync, addWatch,
	// checkWatches and removeWatches included.
	Path string
	Data []byte         // create*, setData
	ACL  []wire.ACL     // create*, setACL
	Ops  []wire.MultiOp // multi, multiRead

	Auth     *wire.AuthPacket      // auth
	Watches  *wire.SetWatches2     // setWatches, setWatches2
	Reconfig *wire.ReconfigRequest // reconfig
}

// Kind says how the member runs a request.
type Kind uint8

// Request kinds.
const (
	// KindUnknown: an opcode this server does not serve; answered
	// Unimplemented.
	KindUnknown Kind = iota
	KindPing
	KindAuth
	KindCloseSession
	// KindWrite: PlanWrite turns it into a transaction.
	KindWrite
	// KindSync: the member catches up with the leader, then SyncReply.
	KindSync
	KindReconfig
	// KindRead: Read runs it against the tree, in request order.
	KindRead
)

// KindOf classifies an opcode.
func KindOf(op int32) Kind {
	switch op {
	case wire.OpPing:
		return KindPing
	case wire.OpAuth:
		return KindAuth
	case wire.OpCloseSession:
		return KindCloseSession
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL,
		wire.OpDelete, wire.OpSetData, wire.OpSetACL, wire.OpCheck, wire.OpMulti:
		return KindWrite
	case wire.OpSync:
		return KindSync
	case wire.OpReconfig:
		return KindReconfig
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2,
		wire.OpGetACL, wire.OpGetAllChildrenNumber, wire.OpGetEphemerals, wire.OpWhoAmI,
		wire.OpSetWatches, wire.OpSetWatches2, wire.OpAddWatch,
		wire.OpCheckWatches, wire.OpRemoveWatches, wire.OpMultiRead:
		return KindRead
	}
	return KindUnknown
}

// AnswersUndecodable reports whether ZooKeeper answers a request of op
// whose body does not decode with MARSHALLINGERROR, keeping the
// connection: the ops its request processors decode. For the others (auth,
// setWatches) it closes the connection.
func AnswersUndecodable(op int32) bool {
	switch op {
	case wire.OpAuth, wire.OpSetWatches, wire.OpSetWatches2, wire.OpPing, wire.OpCloseSession:
		return false
	}
	return KindOf(op) != KindUnknown
}

// Decode reads the body of the request hdr introduces. A body that does not
// decode is an error (see AnswersUndecodable); an unknown opcode is not
// (its body, if any, is ignored).
func Decode(hdr wire.RequestHeader, d *wire.Decoder) (Request, error) {
	r := Request{Xid: hdr.Xid, Op: hdr.Opcode}
	// A failed read is recorded in d, and the record decoders go on
	// harmlessly: one check after the switch covers them all.
	switch r.Op {
	case wire.OpAuth:
		r.Auth = new(wire.AuthPacket)
		r.Auth.Decode(d)
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer:
		var b wire.CreateRequest
		b.Decode(d)
		r.Path, r.Data, r.ACL, r.Flags = b.Path, b.Data, b.ACL, b.Flags
	case wire.OpCreateTTL:
		var b wire.CreateTTLRequest
		b.Decode(d)
		r.Path, r.Data, r.ACL, r.Flags = b.Path, b.Data, b.ACL, b.Flags
	case wire.OpDelete:
		var b wire.DeleteRequest
		b.Decode(d)
		r.Path, r.Version = b.Path, b.Version
	case wire.OpSetData:
		var b wire.SetDataRequest
		b.Decode(d)
		r.Path, r.Data, r.Version = b.Path, b.Data, b.Version
	case wire.OpSetACL:
		var b wire.SetACLRequest
		b.Decode(d)
		r.Path, r.ACL, r.Version = b.Path, b.ACL, b.Version
	case wire.OpCheck:
		var b wire.CheckVersionRequest
		b.Decode(d)
		r.Path, r.Version = b.Path, b.Version
	case wire.OpMulti, wire.OpMultiRead:
		var b wire.MultiRequest
		b.Decode(d)
		r.Ops = b.Ops
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2:
		var b wire.PathWatchRequest
		b.Decode(d)
		r.Path, r.Watch = b.Path, b.Watch
	case wire.OpSync, wire.OpGetACL, wire.OpGetAllChildrenNumber, wire.OpGetEphemerals:
		var b wire.PathRequest
		b.Decode(d)
		r.Path = b.Path
	case wire.OpSetWatches:
		var b wire.SetWatches
		b.Decode(d)
		r.Watches = &wire.SetWatches2{RelativeZxid: b.RelativeZxid, DataWatches: b.DataWatches,
			ExistWatches: b.ExistWatches, ChildWatches: b.ChildWatches}
	case wire.OpSetWatches2:
		r.Watches = new(wire.SetWatches2)
		r.Watches.Decode(d)
	case wire.OpAddWatch:
		var b wire.AddWatchRequest
		b.Decode(d)
		r.Path, r.Mode = b.Path, b.Mode
	case wire.OpCheckWatches, wire.OpRemoveWatches:
		var b wire.RemoveWatchesRequest
		b.Decode(d)
		r.Path, r.Mode = b.Path, b.Type
	case wire.OpReconfig:
		r.Reconfig = new(wire.ReconfigRequest)
		r.Reconfig.Decode(d)
	}
	if err := d.Err(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Kind classifies the request.
func (r *Request) Kind() Kind { return KindOf(r.Op) }
