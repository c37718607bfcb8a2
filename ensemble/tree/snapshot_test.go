package tree

import (
	"bytes"
	"strings"
	"testing"
)

// populated builds a tree exercising every kind of state a snapshot holds.
// bigData adds a node with data large enough to take the snapshot reader's
// chunked path; fuzz seeds leave it out, since minimizing a large input is
// slow.
func populated(t testing.TB, bigData bool) *Tree {
	tr := New()
	zxid := int64(1)
	apply := func(txn *Txn) Result {
		zxid++
		txn.Time = baseTime + zxid
		res := tr.Apply(txn, zxid)
		if res.Err != nil {
			t.Fatalf("setup txn %+v: %v", txn, res.Err)
		}
		return res
	}
	s1 := apply(&Txn{Kind: TxnCreateSession, Timeout: 10000, Password: []byte("p1")}).SessionID
	s2 := apply(&Txn{Kind: TxnCreateSession, Timeout: 20000}).SessionID
	apply(&Txn{Kind: TxnCreateSession, Timeout: 1, Password: []byte{}}) // no ephemerals
	ops := func(sess int64, auth []Identity, op ...Op) {
		apply(&Txn{Kind: TxnOps, Session: sess, Auth: auth, Multi: len(op) > 1, Ops: op})
	}
	ops(0, nil, createOp("/app", "config-data", 0))
	ops(0, nil, Op{Kind: OpCreate, Path: "/app/nil", ACL: OpenACL})
	ops(0, nil, Op{Kind: OpCreate, Path: "/app/empty", Data: []byte{}, ACL: OpenACL})
	ops(0, aliceAuth, createACL("/app/secret", []ACL{{Perms: PermAll, Scheme: "auth"}, {Perms: PermRead, Scheme: "ip", ID: "10.0.0.0/8"}}))
	ops(s1, nil, createOp("/app/lock-", "", ModeEphemeralSequential), createOp("/app/lock-", "", ModeEphemeralSequential))
	ops(s2, nil, createOp("/app/member", "\x00\x01", ModeEphemeral))
	ops(0, nil, createOp("/c", "", ModeContainer), createOp("/c/x", "", 0))
	ops(0, nil, setDataOp("/app", "v2", -1))
	ops(0, aliceAuth, setACLOp("/app/secret", aliceOnly, -1))
	if bigData {
		ops(0, nil, createOp("/app/q-", strings.Repeat("big", 30000), ModePersistentSequential))
	}
	tr.SetConfigData([]byte("server.1=127.0.0.1:2888:3888"), 0)
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestSnapshotRoundTrip(t *testing.T) {
	for name, tr := range map[string]*Tree{"new": New(), "populated": populated(t, false), "big": populated(t, true)} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tr.WriteSnapshot(&buf); err != nil {
				t.Fatal(err)
			}
			raw := bytes.Clone(buf.Bytes())
			got, err := ReadSnapshot(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tr) || !tr.Equal(got) {
				t.Fatal("restored tree differs")
			}
			// The encoding is a function of the state.
			var again bytes.Buffer
			if err := got.WriteSnapshot(&again); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, again.Bytes()) {
				t.Fatal("re-written snapshot differs")
			}
			// The restored tree keeps working like the original.
			txns := []*Txn{
				{Kind: TxnCreateSession, Time: 5},
				{Kind: TxnOps, Ops: []Op{createOp("/after", "", ModePersistentSequential)}},
				{Kind: TxnOps, Ops: []Op{deleteOp("/c/x", -1)}},
			}
			for _, s := range tr.Sessions() {
				txns = append(txns, &Txn{Kind: TxnCloseSession, Session: s.ID})
			}
			for i, txn := range txns {
				a := tr.Apply(txn, int64(1000+i))
				b := got.Apply(txn, int64(1000+i))
				if a.SessionID != b.SessionID || (a.Err == nil) != (b.Err == nil) || !eventsEqual(a.Events, b.Events) {
					t.Fatalf("txn %d diverged: %+v vs %+v", i, a, b)
				}
			}
			if !got.Equal(tr) {
				t.Fatal("diverged after replay")
			}
		})
	}
}

func TestEqualDetectsDifferences(t *testing.T) {
	base := populated(t, true)
	mutations := map[string]func(tr *Tree){
		"data":     func(tr *Tree) { tr.SetConfigData([]byte("other"), 0) },
		"nil data": func(tr *Tree) { tr.nodes["/app/empty"].data = nil },
		"stat":     func(tr *Tree) { tr.nodes["/app"].stat.Mtime++ },
		"acl": func(tr *Tree) {
			tr.Apply(&Txn{Kind: TxnOps, Auth: superAuth, Ops: []Op{setACLOp("/app", aliceOnly, -1)}}, 5000)
		},
		"new session": func(tr *Tree) { tr.Apply(&Txn{Kind: TxnCreateSession}, 5000) },
		"password":    func(tr *Tree) { tr.sessions[tr.Sessions()[0].ID].password = []byte("x") },
		"counter":     func(tr *Tree) { tr.nextSession++ },
		"node":        func(tr *Tree) { tr.Apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/n", "", 0)}}, 5000) },
	}
	for name, mutate := range mutations {
		c := clone(t, base)
		mutate(c)
		if c.Equal(base) || base.Equal(c) {
			t.Errorf("%s: difference not detected", name)
		}
	}
}

func TestSnapshotRejectsCorruption(t *testing.T) {
	var buf bytes.Buffer
	if err := populated(t, true).WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	// Every truncation fails.
	for n := 0; n < len(good); n += 1 + n/50 {
		if _, err := ReadSnapshot(bytes.NewReader(good[:n])); err == nil {
			t.Fatalf("truncation to %d bytes accepted", n)
		}
	}
	// Every single-byte flip fails (the checksum catches what decoding
	// does not).
	for i := 0; i < len(good); i += 1 + i/100 {
		b := bytes.Clone(good)
		b[i] ^= 0x41
		if _, err := ReadSnapshot(bytes.NewReader(b)); err == nil {
			t.Fatalf("flip at byte %d accepted", i)
		}
	}
}

// TestSnapshotRejectsInconsistentState encodes states that a checksum
// cannot object to but that no sequence of transactions can produce.
func TestSnapshotRejectsInconsistentState(t *testing.T) {
	cases := map[string]func(tr *Tree){
		"orphan ephemeral": func(tr *Tree) {
			delete(tr.sessions, tr.nodes["/app/member"].stat.EphemeralOwner)
		},
		"session id beyond counter": func(tr *Tree) { tr.nextSession = 1 },
		"zxid order":                func(tr *Tree) { tr.nodes["/app"].stat.Czxid = 1 << 40 },
		"bad owner":                 func(tr *Tree) { tr.nodes["/app"].stat.EphemeralOwner = -5 },
	}
	for name, corrupt := range cases {
		tr := populated(t, false)
		corrupt(tr)
		var buf bytes.Buffer
		if err := tr.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSnapshot(&buf); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzReadSnapshot(f *testing.F) {
	for _, tr := range []*Tree{New(), populated(f, false)} {
		var buf bytes.Buffer
		if err := tr.WriteSnapshot(&buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("CRTS\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ReadSnapshot(bytes.NewReader(b))
		if err != nil {
			return
		}
		if err := tr.Check(); err != nil {
			t.Fatalf("accepted snapshot fails Check: %v", err)
		}
		var buf bytes.Buffer
		if err := tr.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSnapshot(&buf)
		if err != nil || !again.Equal(tr) {
			t.Fatalf("re-read: %v", err)
		}
	})
}

func TestClone(t *testing.T) {
	tr := populated(t, false)
	c := tr.Clone()
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if !c.Equal(tr) {
		t.Fatal("clone differs")
	}
	snap := clone(t, tr)
	// Changing the original leaves the clone alone, and vice versa.
	tr.Apply(&Txn{Kind: TxnOps, Auth: superAuth, Multi: true, Ops: []Op{
		setDataOp("/app", "changed", -1),
		setACLOp("/app/nil", aliceOnly, -1),
		createOp("/new", "", 0),
		deleteOp("/app/empty", -1),
	}}, 9000)
	for _, s := range tr.Sessions() {
		tr.Apply(&Txn{Kind: TxnCloseSession, Session: s.ID}, 9001)
	}
	tr.SetConfigData([]byte("changed"), 9002)
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if !c.Equal(snap) {
		t.Fatal("clone changed with the original")
	}
	c.Apply(&Txn{Kind: TxnOps, Ops: []Op{createOp("/only-in-clone", "", 0)}}, 9002)
	if _, err := tr.Exists("/only-in-clone"); err == nil {
		t.Fatal("original changed with the clone")
	}
}
