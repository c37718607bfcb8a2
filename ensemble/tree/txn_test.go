package tree

import (
	"reflect"
	"testing"
)

func sampleTxns() []*Txn {
	return []*Txn{
		{Kind: TxnCreateSession, Time: baseTime, Timeout: 30000, Password: []byte{0, 1, 2, 255}},
		{Kind: TxnCreateSession, Time: -1, Timeout: -5},
		{Kind: TxnCreateSession, Password: []byte{}},
		{Kind: TxnCloseSession, Session: 1 << 50, Time: baseTime},
		{Kind: TxnCloseSession},
		{Kind: TxnOps, Session: 7, Time: baseTime, Auth: []Identity{localhost, alice, superID},
			Ops: []Op{createOp("/a", "data", ModeEphemeralSequential)}},
		{Kind: TxnOps, Ops: []Op{{Kind: OpCreate, Path: "/nil-data", ACL: OpenACL}}},
		{Kind: TxnOps, Ops: []Op{{Kind: OpCreate, Path: "/empty", Data: []byte{}, ACL: []ACL{}, Mode: -3}}},
		{Kind: TxnOps, Auth: []Identity{}, Multi: true, Ops: []Op{}},
		{Kind: TxnOps, Multi: true},
		{Kind: TxnOps, Session: -9, Time: 1, Multi: true, Ops: []Op{
			createOp("/x", "", ModeContainer),
			deleteOp("/x", -1),
			setDataOp("/y", "\x00\xff", 1<<30),
			setACLOp("/y", []ACL{{Perms: -1, Scheme: "digest", ID: "ü:ß"}, {Perms: PermRead, Scheme: "ip", ID: "10.0.0.0/8"}}, -2147483648),
			checkOp("/y", 2147483647),
			{Kind: OpFail, Path: "/z", Fail: FailUnreadable},
		}},
		{Kind: TxnOps, Multi: true, Ops: []Op{checkOp("/y", -1), {Kind: OpFail, Path: "bad", Fail: FailBadArguments}}},
	}
}

func TestTxnRoundTrip(t *testing.T) {
	for i, txn := range sampleTxns() {
		b, err := txn.MarshalBinary()
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if b[0] != txnVersion {
			t.Fatalf("%d: version byte %d", i, b[0])
		}
		var got Txn
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(&got, txn) {
			t.Fatalf("%d: round trip\n got %#v\nwant %#v", i, got, *txn)
		}
		// Every strict prefix is rejected.
		for n := range len(b) {
			var x Txn
			if err := x.UnmarshalBinary(b[:n]); err == nil {
				t.Fatalf("%d: prefix of %d/%d bytes accepted", i, n, len(b))
			}
		}
		// Trailing garbage is rejected.
		var x Txn
		if err := x.UnmarshalBinary(append(b, 0)); err == nil {
			t.Fatalf("%d: trailing byte accepted", i)
		}
	}
}

func TestTxnUnmarshalKeepsNoAlias(t *testing.T) {
	txn := &Txn{Kind: TxnOps, Ops: []Op{createOp("/a", "data", 0)}}
	b, _ := txn.MarshalBinary()
	var got Txn
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	clear(b)
	if string(got.Ops[0].Data) != "data" || got.Ops[0].Path != "/a" {
		t.Fatalf("decoded txn aliases its input: %+v", got.Ops[0])
	}
}

func TestTxnRejects(t *testing.T) {
	bad := map[string][]byte{
		"empty":           {},
		"version":         {9, byte(TxnCloseSession), 0, 0},
		"kind":            {txnVersion, 0},
		"kind high":       {txnVersion, 200},
		"flags":           {txnVersion, byte(TxnOps), 0, 0, 2, 0, 0},
		"op kind":         {txnVersion, byte(TxnOps), 0, 0, 1, 0, 2, 9, 0},
		"failure":         {txnVersion, byte(TxnOps), 0, 0, 1, 0, 2, byte(OpFail), 0, 4},
		"no failure":      {txnVersion, byte(TxnOps), 0, 0, 1, 0, 2, byte(OpFail), 0, 0},
		"huge list":       {txnVersion, byte(TxnOps), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge string":     {txnVersion, byte(TxnOps), 0, 0, 0, 0, 2, byte(OpCheck), 0xff, 0xff, 0x03},
		"int32 overflow":  {txnVersion, byte(TxnCreateSession), 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0},
		"varint overflow": {txnVersion, byte(TxnCloseSession), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0},
	}
	for name, b := range bad {
		var txn Txn
		if err := txn.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: accepted %+v", name, txn)
		}
	}
	// An unknown kind cannot be encoded either.
	if _, err := (&Txn{Kind: 77}).MarshalBinary(); err == nil {
		t.Error("marshalled unknown kind")
	}
	if _, err := (&Txn{Kind: TxnOps, Ops: []Op{{Kind: 0}}}).MarshalBinary(); err == nil {
		t.Error("marshalled unknown op kind")
	}
}

func FuzzTxnUnmarshal(f *testing.F) {
	for _, txn := range sampleTxns() {
		b, err := txn.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{txnVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		var txn Txn
		if err := txn.UnmarshalBinary(b); err != nil {
			return
		}
		// Whatever decodes must re-encode to something that decodes to
		// the same value.
		b2, err := txn.MarshalBinary()
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		var again Txn
		if err := again.UnmarshalBinary(b2); err != nil {
			t.Fatalf("re-unmarshal: %v", err)
		}
		if !reflect.DeepEqual(txn, again) {
			t.Fatalf("unstable: %#v vs %#v", txn, again)
		}
		// And applying it must not panic or break the tree.
		tr := New()
		tr.Apply(&Txn{Kind: TxnCreateSession, Time: 1}, 1)
		tr.Apply(&txn, 2)
		if err := tr.Check(); err != nil {
			t.Fatalf("Check after applying %#v: %v", txn, err)
		}
	})
}
