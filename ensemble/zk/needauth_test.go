package zk_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

func TestNeededAuth(t *testing.T) {
	f := newFixture(t)
	admin := f.session(annID, opsID)
	f.create(admin, "/open", nil)
	f.create(admin, "/ann", annOnly)
	f.create(admin, "/ops", opsOnly)
	f.create(admin, "/lan", []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "ip", ID: "127.0.0.0/8"}}})
	f.create(admin, "/ann/child", open)

	bob := tree.Identity{Scheme: "digest", ID: zk.DigestID("bob:pw")}
	ip := anyone[0]
	super := tree.Identity{Scheme: "super"}
	all := []tree.Identity{ip, annID, bob, opsID}
	authACL := []tree.ACL{{Perms: tree.PermAll, Scheme: "auth"}}
	annACL := zk.TreeACLs(annOnly)

	cases := []struct {
		name string
		auth []tree.Identity
		ops  []tree.Op
		want []tree.Identity
	}{
		{"setData on an open node needs none", all,
			[]tree.Op{{Kind: tree.OpSetData, Path: "/open"}}, []tree.Identity{}},
		{"setData on a digest node: that digest", all,
			[]tree.Op{{Kind: tree.OpSetData, Path: "/ann"}}, []tree.Identity{annID}},
		{"x509 ACL: that certificate's identity", all,
			[]tree.Op{{Kind: tree.OpCheck, Path: "/ops"}}, []tree.Identity{opsID}},
		{"ip ACL: the address it covers", all,
			[]tree.Op{{Kind: tree.OpSetACL, Path: "/lan", ACL: zk.TreeACLs(open)}}, []tree.Identity{ip}},
		{"create checks the parent", all,
			[]tree.Op{{Kind: tree.OpCreate, Path: "/ann/new", ACL: zk.TreeACLs(open)}}, []tree.Identity{annID}},
		{"delete checks the parent, not the node", all,
			[]tree.Op{{Kind: tree.OpDelete, Path: "/ann/child"}}, []tree.Identity{annID}},
		{"create under a missing parent checks nothing", all,
			[]tree.Op{{Kind: tree.OpCreate, Path: "/none/x", ACL: zk.TreeACLs(open)}}, []tree.Identity{}},
		{"create with an auth ACL: every digest and x509 identity", all,
			[]tree.Op{{Kind: tree.OpCreate, Path: "/open/a", ACL: authACL}}, []tree.Identity{annID, bob, opsID}},
		{"setACL to auth expands too", all,
			[]tree.Op{{Kind: tree.OpSetACL, Path: "/open", ACL: authACL}}, []tree.Identity{annID, bob, opsID}},
		{"a multi: each op's node", all,
			[]tree.Op{{Kind: tree.OpCheck, Path: "/ops"}, {Kind: tree.OpSetData, Path: "/ann"}}, []tree.Identity{annID, opsID}},
		{"a multi: a node an earlier op creates is checked against that op's ACL", []tree.Identity{ip, bob, annID},
			[]tree.Op{{Kind: tree.OpCreate, Path: "/open/n", ACL: annACL}, {Kind: tree.OpSetData, Path: "/open/n"}}, []tree.Identity{annID}},
		{"super is always carried", []tree.Identity{ip, super, bob},
			[]tree.Op{{Kind: tree.OpSetData, Path: "/ann"}}, []tree.Identity{super}},
		{"identities the requester lacks are not invented", []tree.Identity{ip, bob},
			[]tree.Op{{Kind: tree.OpSetData, Path: "/ann"}}, []tree.Identity{}},
		{"no identities", nil,
			[]tree.Op{{Kind: tree.OpSetData, Path: "/ann"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := zk.NeededAuth(c.ops, c.auth, f.tree.CheckedACL)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// Trimmed identities change no outcome: random writes by requesters with
// random identities against a tree of random ACLs, applied to two copies,
// one with the connection's identities and one with NeededAuth's, give the
// same results and the same trees.
func TestNeededAuthChangesNoOutcome(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []tree.Identity{
		{Scheme: "ip", ID: "127.0.0.1"}, {Scheme: "ip", ID: "10.0.0.7"},
		{Scheme: "x509", ID: "O=ops"}, {Scheme: "super"},
	}
	for i := range 6 {
		pool = append(pool, tree.Identity{Scheme: "digest", ID: zk.DigestID(fmt.Sprintf("u%d:pw", i))})
	}
	randACL := func() []tree.ACL {
		switch rng.IntN(6) {
		case 0:
			return slices.Clone(tree.OpenACL)
		case 1:
			return []tree.ACL{{Perms: tree.PermAll, Scheme: "auth"}}
		case 2:
			return []tree.ACL{{Perms: tree.PermAll, Scheme: "ip", ID: "127.0.0.0/8"}}
		}
		var acl []tree.ACL
		for range 1 + rng.IntN(3) {
			id := pool[rng.IntN(len(pool))]
			if id.Scheme == "super" {
				continue
			}
			acl = append(acl, tree.ACL{Perms: 1 << rng.IntN(5) * int32(1+rng.IntN(2)), Scheme: id.Scheme, ID: id.ID})
		}
		if len(acl) == 0 {
			return slices.Clone(tree.OpenACL)
		}
		return acl
	}
	paths := []string{"/a", "/b", "/a/x", "/a/y", "/b/x", "/c"}
	randOp := func() tree.Op {
		p := paths[rng.IntN(len(paths))]
		switch rng.IntN(5) {
		case 0:
			return tree.Op{Kind: tree.OpCreate, Path: p, ACL: randACL(), Data: []byte("d")}
		case 1:
			return tree.Op{Kind: tree.OpDelete, Path: p, Version: -1}
		case 2:
			return tree.Op{Kind: tree.OpSetData, Path: p, Data: []byte("e"), Version: -1}
		case 3:
			return tree.Op{Kind: tree.OpSetACL, Path: p, ACL: randACL(), Version: -1}
		}
		return tree.Op{Kind: tree.OpCheck, Path: p, Version: -1}
	}
	full, trimmed := tree.New(), tree.New()
	outcomes := map[wire.Code]int{}
	for zxid := int64(1); zxid <= 5000; zxid++ {
		var auth []tree.Identity
		for _, id := range pool {
			if rng.IntN(3) == 0 && (id.Scheme != "super" || rng.IntN(10) == 0) {
				auth = append(auth, id)
			}
		}
		ops := []tree.Op{randOp()}
		for rng.IntN(3) == 0 {
			ops = append(ops, randOp())
		}
		txn := tree.Txn{Kind: tree.TxnOps, Time: zxid, Auth: auth, Multi: len(ops) > 1, Ops: ops}
		small := txn
		small.Auth = zk.NeededAuth(ops, auth, trimmed.CheckedACL)
		a, b := full.Apply(&txn, zxid), trimmed.Apply(&small, zxid)
		if !sameResult(a, b) {
			t.Fatalf("zxid %d: %+v with %v: full %+v, trimmed to %v %+v", zxid, ops, auth, a, small.Auth, b)
		}
		outcomes[zk.CodeOf(a.Err)]++
	}
	// The run means something only if it both granted and refused.
	if outcomes[wire.OK] < 200 || outcomes[wire.ErrNoAuth] < 200 {
		t.Fatalf("outcomes %v: too few grants or refusals to compare", outcomes)
	}
	if fa, ta := acls(full, paths), acls(trimmed, paths); !reflect.DeepEqual(fa, ta) {
		t.Fatalf("trees differ: %v / %v", fa, ta)
	}
}

func sameResult(a, b tree.Result) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) || len(a.Ops) != len(b.Ops) {
		return false
	}
	for i := range a.Ops {
		if (a.Ops[i].Err == nil) != (b.Ops[i].Err == nil) || a.Ops[i].Path != b.Ops[i].Path || a.Ops[i].Stat != b.Ops[i].Stat {
			return false
		}
	}
	return true
}

func acls(t *tree.Tree, paths []string) map[string][]tree.ACL {
	out := map[string][]tree.ACL{}
	super := []tree.Identity{{Scheme: "super"}}
	for _, p := range paths {
		if acl, _, err := t.GetACL(p, super); err == nil {
			out[p] = acl
		}
	}
	return out
}

// BenchmarkNeededAuth is the trim's cost for a write from a connection at
// the identity cap, against one whose ACL names one of them.
func BenchmarkNeededAuth(b *testing.B) {
	t := tree.New()
	user := tree.Identity{Scheme: "digest", ID: zk.DigestID("u7:pw")}
	res := t.Apply(&tree.Txn{Kind: tree.TxnOps, Ops: []tree.Op{{Kind: tree.OpCreate, Path: "/n",
		ACL: []tree.ACL{{Perms: tree.PermAll, Scheme: "digest", ID: user.ID}}}}}, 1)
	if res.Err != nil {
		b.Fatal(res.Err)
	}
	auth := []tree.Identity{{Scheme: "ip", ID: "127.0.0.1"}}
	for i := range zk.MaxIdentities - 1 {
		auth = append(auth, tree.Identity{Scheme: "digest", ID: zk.DigestID(fmt.Sprintf("u%d:pw", i))})
	}
	ops := []tree.Op{{Kind: tree.OpSetData, Path: "/n", Data: []byte("x"), Version: -1}}
	for b.Loop() {
		if got := zk.NeededAuth(ops, auth, t.CheckedACL); len(got) != 1 {
			b.Fatal(got)
		}
	}
}
