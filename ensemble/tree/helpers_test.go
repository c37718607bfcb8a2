package tree

import (
	"bytes"
	"errors"
	"testing"
)

var (
	alice      = Identity{Scheme: "digest", ID: "alice:aGFzaA=="}
	bob        = Identity{Scheme: "digest", ID: "bob:Ym9i"}
	superID    = Identity{Scheme: "super", ID: ""}
	localhost  = Identity{Scheme: "ip", ID: "127.0.0.1"}
	aliceOnly  = []ACL{{Perms: PermAll, Scheme: "digest", ID: alice.ID}}
	baseTime   = int64(1_700_000_000_000)
	superAuth  = []Identity{superID}
	aliceAuth  = []Identity{localhost, alice}
	noAuth     = []Identity(nil)
	openCreate = Op{Kind: OpCreate, ACL: OpenACL}
)

func createOp(path, data string, mode Mode) Op {
	op := openCreate
	op.Path, op.Mode = path, mode
	if data != "" {
		op.Data = []byte(data)
	}
	return op
}

func createACL(path string, acl []ACL) Op {
	return Op{Kind: OpCreate, Path: path, ACL: acl}
}

func deleteOp(path string, version int32) Op {
	return Op{Kind: OpDelete, Path: path, Version: version}
}

func setDataOp(path, data string, version int32) Op {
	return Op{Kind: OpSetData, Path: path, Data: []byte(data), Version: version}
}

func setACLOp(path string, acl []ACL, version int32) Op {
	return Op{Kind: OpSetACL, Path: path, ACL: acl, Version: version}
}

func checkOp(path string, version int32) Op {
	return Op{Kind: OpCheck, Path: path, Version: version}
}

// harness applies transactions with increasing zxids and verifies the
// tree's invariants after each one.
type harness struct {
	t    *testing.T
	tree *Tree
	zxid int64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, tree: New(), zxid: 1}
	if err := h.tree.Check(); err != nil {
		t.Fatalf("New: %v", err)
	}
	return h
}

func (h *harness) apply(txn *Txn) Result {
	h.t.Helper()
	h.zxid++
	if txn.Time == 0 {
		txn.Time = baseTime + h.zxid
	}
	res := h.tree.Apply(txn, h.zxid)
	if err := h.tree.Check(); err != nil {
		h.t.Fatalf("Check after zxid %d: %v", h.zxid, err)
	}
	return res
}

// do applies one op as session sess with the given identities.
func (h *harness) do(sess int64, auth []Identity, op Op) Result {
	h.t.Helper()
	return h.apply(&Txn{Kind: TxnOps, Session: sess, Auth: auth, Ops: []Op{op}})
}

// must applies one op and fails the test on error.
func (h *harness) must(sess int64, auth []Identity, op Op) OpResult {
	h.t.Helper()
	res := h.do(sess, auth, op)
	if res.Err != nil {
		h.t.Fatalf("op %+v: %v", op, res.Err)
	}
	return res.Ops[0]
}

func (h *harness) multi(sess int64, auth []Identity, ops ...Op) Result {
	h.t.Helper()
	return h.apply(&Txn{Kind: TxnOps, Session: sess, Auth: auth, Multi: true, Ops: ops})
}

func (h *harness) session() int64 {
	h.t.Helper()
	res := h.apply(&Txn{Kind: TxnCreateSession, Timeout: 30000, Password: []byte("secret")})
	if res.Err != nil || res.SessionID <= 0 {
		h.t.Fatalf("create session: %+v", res)
	}
	return res.SessionID
}

func (h *harness) closeSession(id int64) Result {
	h.t.Helper()
	return h.apply(&Txn{Kind: TxnCloseSession, Session: id})
}

func (h *harness) stat(path string) Stat {
	h.t.Helper()
	st, err := h.tree.Exists(path)
	if err != nil {
		h.t.Fatalf("Exists(%s): %v", path, err)
	}
	return st
}

func (h *harness) exists(path string) bool {
	_, err := h.tree.Exists(path)
	return err == nil
}

// clone copies a tree through a snapshot.
func clone(t *testing.T, tr *Tree) *Tree {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	c, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Equal(tr) || !tr.Equal(c) {
		t.Fatal("snapshot copy differs")
	}
	return c
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s: unexpected error %v", what, got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Fatalf("%s: got error %v, want %v", what, got, want)
	}
}

// eventsEqual compares types and paths; the ACLs events carry are checked
// by the tests about them.
func eventsEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Path != b[i].Path {
			return false
		}
	}
	return true
}
