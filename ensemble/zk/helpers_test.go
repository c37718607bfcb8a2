package zk_test

import (
	"testing"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// A bare tree, driven the way a member drives it: requests decoded from
// their wire form, writes planned and applied in zxid order, reads run
// against the tree, replies decoded back.

var limits = zk.Limits{MaxData: 1 << 10}

type fixture struct {
	t    *testing.T
	tree *tree.Tree
	zxid int64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, tree: tree.New()}
}

// anyone is a session of the loopback ip identity only.
var anyone = []tree.Identity{{Scheme: "ip", ID: "127.0.0.1"}}

// session creates a session holding auth.
func (f *fixture) session(auth ...tree.Identity) zk.Session {
	f.t.Helper()
	f.zxid++
	res := f.tree.Apply(&tree.Txn{Kind: tree.TxnCreateSession, Timeout: 4000, Time: 1000, Password: make([]byte, 16)}, f.zxid)
	if res.Err != nil {
		f.t.Fatalf("create session: %v", res.Err)
	}
	return zk.Session{ID: res.SessionID, Auth: append(append([]tree.Identity{}, anyone...), auth...)}
}

type encodable interface{ Encode(*wire.Encoder) }

// request is the request of op with body as a member decodes it.
func request(t *testing.T, xid, op int32, body encodable) zk.Request {
	t.Helper()
	e := wire.NewEncoder(nil)
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if body != nil {
		body.Encode(e)
	}
	d := wire.NewDecoder(e.Bytes())
	var hdr wire.RequestHeader
	if err := hdr.Decode(d); err != nil {
		t.Fatal(err)
	}
	req, err := zk.Decode(hdr, d)
	if err != nil {
		t.Fatalf("decode %s: %v", wire.OpName(op), err)
	}
	return req
}

// reply splits a reply frame into its header and a decoder of its body.
func reply(t *testing.T, frame []byte) (wire.ReplyHeader, *wire.Decoder) {
	t.Helper()
	d := wire.NewDecoder(frame[4:])
	var h wire.ReplyHeader
	if err := h.Decode(d); err != nil {
		t.Fatalf("reply header: %v", err)
	}
	return h, d
}

// write plans a write of s and, when the plan has a transaction, applies
// it at the next zxid; it returns the reply.
func (f *fixture) write(s zk.Session, op int32, body encodable) (wire.ReplyHeader, *wire.Decoder) {
	f.t.Helper()
	req := request(f.t, 1, op, body)
	plan := zk.PlanWrite(&req, s, limits)
	if plan.Txn == nil {
		return reply(f.t, plan.Answer(req.Xid, f.zxid))
	}
	f.zxid++
	plan.Txn.Time = 2000
	res := f.tree.Apply(plan.Txn, f.zxid)
	o := zk.OutcomeOf(&res)
	return reply(f.t, plan.Reply(req.Xid, f.zxid, &o))
}

// mustWrite is write expecting success.
func (f *fixture) mustWrite(s zk.Session, op int32, body encodable) *wire.Decoder {
	f.t.Helper()
	h, d := f.write(s, op, body)
	if h.Err != wire.OK {
		f.t.Fatalf("%s: %v", wire.OpName(op), h.Err)
	}
	return d
}

// create makes a persistent node with acl (open when nil).
func (f *fixture) create(s zk.Session, path string, acl []wire.ACL) {
	f.t.Helper()
	if acl == nil {
		acl = open
	}
	f.mustWrite(s, wire.OpCreate, &wire.CreateRequest{Path: path, ACL: acl})
}

// read runs a read of s at the tree's current zxid.
func (f *fixture) read(s zk.Session, op int32, body encodable) (wire.ReplyHeader, *wire.Decoder, zk.Result) {
	f.t.Helper()
	req := request(f.t, 2, op, body)
	var res zk.Result
	zk.Read(f.tree, s, &req, f.zxid, &res)
	if res.Frame == nil {
		return wire.ReplyHeader{}, nil, res
	}
	h, d := reply(f.t, res.Frame)
	return h, d, res
}

var (
	open     = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}}
	opsOnly  = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "x509", ID: "O=ops"}}}
	opsID    = tree.Identity{Scheme: "x509", ID: "O=ops"}
	annID    = tree.Identity{Scheme: "digest", ID: zk.DigestID("ann:secret")}
	annOnly  = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: zk.DigestID("ann:secret")}}}
	readOnly = []wire.ACL{{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}}}
)
