package tree

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"
)

var (
	opsHost1 = Identity{Scheme: "x509", ID: "CN=host1,OU=batch,O=ops"}
	opsOrg   = Identity{Scheme: "x509", ID: "O=ops"}
)

func TestFixupACLX509(t *testing.T) {
	cases := []fixupCase{
		{"x509 dn", []ACL{{Perms: PermRead, Scheme: "x509", ID: opsHost1.ID}}, nil,
			[]ACL{{Perms: PermRead, Scheme: "x509", ID: opsHost1.ID}}},
		{"x509 attribute", []ACL{{Perms: PermAll, Scheme: "x509", ID: "O=ops"}}, nil,
			[]ACL{{Perms: PermAll, Scheme: "x509", ID: "O=ops"}}},
		{"x509 SAN value", []ACL{{Perms: PermAll, Scheme: "x509", ID: "host1.ops.example"}}, nil,
			[]ACL{{Perms: PermAll, Scheme: "x509", ID: "host1.ops.example"}}},
		{"x509 empty id", []ACL{{Perms: PermAll, Scheme: "x509", ID: ""}}, nil, nil},
		{"auth expands to x509 identities", []ACL{{Perms: PermAll, Scheme: "auth"}}, []Identity{localhost, opsHost1, opsOrg},
			[]ACL{{Perms: PermAll, Scheme: "x509", ID: opsHost1.ID}, {Perms: PermAll, Scheme: "x509", ID: "O=ops"}}},
		{"auth expands to digest and x509 in order", []ACL{{Perms: 3, Scheme: "auth"}}, []Identity{localhost, opsOrg, alice},
			[]ACL{{Perms: 3, Scheme: "x509", ID: "O=ops"}, {Perms: 3, Scheme: "digest", ID: alice.ID}}},
	}
	checkFixups(t, cases)
	// Without the scheme (a replayed entry from before it existed), x509
	// is unknown: entries are invalid and "auth" ignores x509 identities.
	if got, err := fixupACLSchemes([]ACL{{Perms: PermAll, Scheme: "x509", ID: "O=ops"}}, nil, false); !errors.Is(err, ErrInvalidACL) {
		t.Errorf("x509 entry without the scheme: %v, %v", got, err)
	}
	if got, err := fixupACLSchemes([]ACL{{Perms: PermAll, Scheme: "auth"}}, []Identity{opsOrg}, false); !errors.Is(err, ErrInvalidACL) {
		t.Errorf("auth with only x509 identities, without the scheme: %v, %v", got, err)
	}
}

func TestPermittedX509(t *testing.T) {
	acl := []ACL{{Perms: PermRead, Scheme: "x509", ID: "O=ops"}}
	cases := []struct {
		name string
		auth []Identity
		want bool
	}{
		{"same id", []Identity{localhost, opsOrg}, true},
		{"full DN is not the attribute", []Identity{opsHost1}, false},
		{"case matters", []Identity{{Scheme: "x509", ID: "o=ops"}}, false},
		{"no prefix match", []Identity{{Scheme: "x509", ID: "O=ops,O=x"}}, false},
		{"other scheme, same id", []Identity{{Scheme: "digest", ID: "O=ops"}}, false},
		{"nobody", nil, false},
		{"super", superAuth, true},
	}
	for _, c := range cases {
		if got := Permitted(acl, PermRead, c.auth); got != c.want {
			t.Errorf("%s: Permitted = %v, want %v", c.name, got, c.want)
		}
	}
	if Permitted(acl, PermWrite, []Identity{opsOrg}) {
		t.Error("READ-only entry granted WRITE")
	}
	if !Permitted(OpenACL, PermRead, nil) || Permitted(acl, PermRead, nil) {
		t.Error("Permitted(acl, READ, nil) must tell world-readable lists from others")
	}
}

// An x509 ACL works end to end in the tree: a session holding the identity
// may use the node, others may not, and "auth" grants the identities the
// creator holds.
func TestApplyX509ACL(t *testing.T) {
	h := newHarness(t)
	host1 := []Identity{localhost, opsHost1, opsOrg}
	host2 := []Identity{localhost, {Scheme: "x509", ID: "CN=host2,O=ops"}, opsOrg}
	other := []Identity{localhost, {Scheme: "x509", ID: "CN=host3,O=other"}, {Scheme: "x509", ID: "O=other"}}
	h.must(0, host1, createACL("/ops", []ACL{{Perms: PermAll, Scheme: "x509", ID: "O=ops"}}))
	if _, _, err := h.tree.Get("/ops", host2); err != nil {
		t.Fatalf("host2 (O=ops) reading: %v", err)
	}
	if _, _, err := h.tree.Get("/ops", other); !errors.Is(err, ErrNoAuth) {
		t.Fatalf("O=other reading: %v, want ErrNoAuth", err)
	}
	wantErr(t, "O=other writing", h.do(0, other, setDataOp("/ops", "x", -1)).Err, ErrNoAuth)
	h.must(0, host2, setDataOp("/ops", "x", -1))

	h.must(0, host1, createACL("/mine", []ACL{{Perms: PermAll, Scheme: "auth"}}))
	acl, _, err := h.tree.GetACL("/mine", host1)
	want := []ACL{{Perms: PermAll, Scheme: "x509", ID: opsHost1.ID}, {Perms: PermAll, Scheme: "x509", ID: "O=ops"}}
	if err != nil || !slices.Equal(acl, want) {
		t.Fatalf("auth expanded to %v, %v; want %v", acl, err, want)
	}
}

// flagsOffset is where a TxnOps encoding keeps its flags byte.
func flagsOffset(txn *Txn) int {
	var buf [binary.MaxVarintLen64]byte
	return 2 + binary.PutVarint(buf[:], txn.Session) + binary.PutVarint(buf[:], txn.Time)
}

func TestTxnX509Flag(t *testing.T) {
	x509ACL := &Txn{Kind: TxnOps, Session: 0, Time: baseTime, Auth: []Identity{localhost},
		Ops: []Op{createACL("/n", []ACL{{Perms: PermAll, Scheme: "x509", ID: "O=ops"}})}}
	authX509 := &Txn{Kind: TxnOps, Time: baseTime, Auth: []Identity{localhost, opsOrg},
		Ops: []Op{createACL("/n", []ACL{{Perms: PermAll, Scheme: "auth"}})}}
	idOnly := &Txn{Kind: TxnOps, Time: baseTime, Auth: []Identity{localhost, opsOrg},
		Ops: []Op{createOp("/n", "", ModePersistent)}}

	for name, c := range map[string]struct {
		txn  *Txn
		flag bool
	}{
		"x509 ACL entry":              {x509ACL, true},
		"auth with x509 identities":   {authX509, true},
		"x509 identities, no ACL use": {idOnly, false},
	} {
		b, err := c.txn.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got := b[flagsOffset(c.txn)]&flagX509 != 0; got != c.flag {
			// Without need the flag would make older members refuse
			// every write of a client holding a certificate identity.
			t.Errorf("%s: flag %v, want %v", name, got, c.flag)
		}
		var got Txn
		if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(&got, c.txn) {
			t.Errorf("%s: round trip %#v, %v", name, got, err)
		}
	}

	// An entry a member without the x509 scheme wrote (no flag) was
	// applied with the ACL invalid; replayed today it must fail alike,
	// or members replaying from different snapshots would disagree.
	for name, txn := range map[string]*Txn{"x509 ACL entry": x509ACL, "auth with x509 identities": authX509} {
		b, _ := txn.MarshalBinary()
		b[flagsOffset(txn)] &^= flagX509
		var old Txn
		if err := old.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: legacy entry: %v", name, err)
		}
		if !old.preX509 {
			t.Fatalf("%s: legacy entry not recognised", name)
		}
		// It re-encodes as what it was.
		b2, _ := old.MarshalBinary()
		if b2[flagsOffset(&old)]&flagX509 != 0 {
			t.Errorf("%s: legacy entry gained the flag on re-encoding", name)
		}
		h := newHarness(t)
		wantErr(t, name+", legacy", h.apply(&old).Err, ErrInvalidACL)
		var cur Txn
		b, _ = txn.MarshalBinary()
		if err := cur.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		h = newHarness(t)
		wantErr(t, name+", current", h.apply(&cur).Err, nil)
	}
}

// Events carry the ACL that gates them, as it stood when the change was
// made: the node's for created, data changed and deleted; the parent's
// for children changed.
func TestEventACLs(t *testing.T) {
	h := newHarness(t)
	parentACL := []ACL{{Perms: PermAll, Scheme: "digest", ID: alice.ID}}
	childACL := []ACL{{Perms: PermRead, Scheme: "x509", ID: "O=ops"}, {Perms: PermAll, Scheme: "digest", ID: alice.ID}}
	h.must(0, aliceAuth, createACL("/p", parentACL))
	wantEvents := func(what string, res Result, want ...Event) {
		t.Helper()
		if res.Err != nil {
			t.Fatalf("%s: %v", what, res.Err)
		}
		if !eventsEqual(res.Events, want) {
			t.Fatalf("%s: events %v, want %v", what, res.Events, want)
		}
		for i := range want {
			if !slices.Equal(res.Events[i].ACL, want[i].ACL) {
				t.Errorf("%s: event %d (%v %s) ACL %v, want %v", what, i, want[i].Type, want[i].Path, res.Events[i].ACL, want[i].ACL)
			}
		}
	}
	wantEvents("create", h.do(0, aliceAuth, createACL("/p/c", childACL)),
		Event{Type: EventCreated, Path: "/p/c", ACL: childACL},
		Event{Type: EventChildrenChanged, Path: "/p", ACL: parentACL})
	wantEvents("setData", h.do(0, aliceAuth, setDataOp("/p/c", "x", -1)),
		Event{Type: EventDataChanged, Path: "/p/c", ACL: childACL})

	// Within a multi each event has the ACL in force at its op.
	wantEvents("setData then setACL", h.multi(0, aliceAuth, setDataOp("/p/c", "y", -1), setACLOp("/p/c", OpenACL, -1)),
		Event{Type: EventDataChanged, Path: "/p/c", ACL: childACL})
	wantEvents("setACL then setData", h.multi(0, aliceAuth, setACLOp("/p/c", childACL, -1), setDataOp("/p/c", "z", -1)),
		Event{Type: EventDataChanged, Path: "/p/c", ACL: childACL})

	// A deleted node's events carry its last ACL.
	wantEvents("delete", h.do(0, aliceAuth, deleteOp("/p/c", -1)),
		Event{Type: EventDeleted, Path: "/p/c", ACL: childACL},
		Event{Type: EventChildrenChanged, Path: "/p", ACL: parentACL})

	// Ephemerals removed with their session, and containers emptied.
	s := h.session()
	h.must(0, aliceAuth, Op{Kind: OpCreate, Path: "/p/box", ACL: OpenACL, Mode: ModeContainer})
	h.must(s, aliceAuth, Op{Kind: OpCreate, Path: "/p/box/e", ACL: childACL, Mode: ModeEphemeral})
	wantEvents("session close", h.closeSession(s),
		Event{Type: EventDeleted, Path: "/p/box/e", ACL: childACL},
		Event{Type: EventChildrenChanged, Path: "/p/box", ACL: OpenACL},
		Event{Type: EventDeleted, Path: "/p/box", ACL: OpenACL},
		Event{Type: EventChildrenChanged, Path: "/p", ACL: parentACL})
}
