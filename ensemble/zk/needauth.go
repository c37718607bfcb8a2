package zk

import "github.com/coordrun/coordrun/ensemble/tree"

// NeededAuth is the part of auth that applying ops can consult, in auth's
// order: the identities an entry of a checked ACL names, every identity
// the "auth" scheme expands to when an op's ACL uses it, and the super
// identity. checked gives the ACL an op's apply checks as the tree stands
// (tree.CheckedACL); the ACLs the ops themselves carry count too, since an
// earlier op of a multi may create the node a later one checks, or set its
// ACL. A write's transaction carries only this: the identities a client
// added with auth packets stay out of every raft entry that does not need
// them (ZooKeeper checks ACLs before it logs a write and logs none).
//
// Apply stays the judge: it checks against the identities the entry
// carries, which are a subset of the connection's. If the ACL changes
// between planning and apply (a concurrent setACL, or a member whose tree
// lags the leader's), the subset may miss an identity the new ACL names,
// and the write fails with NOAUTH, as it could have had it been ordered
// just after that setACL; it can never be granted more than the
// connection's identities allow.
func NeededAuth(ops []tree.Op, auth []tree.Identity, checked func(*tree.Op) ([]tree.ACL, bool)) []tree.Identity {
	if len(auth) == 0 {
		return auth
	}
	var acls [][]tree.ACL
	expand := false
	for i := range ops {
		op := &ops[i]
		if acl, ok := checked(op); ok {
			acls = append(acls, acl)
		}
		if op.Kind == tree.OpCreate || op.Kind == tree.OpSetACL {
			acls = append(acls, op.ACL)
			for _, a := range op.ACL {
				expand = expand || tree.IsAuthScheme(a)
			}
		}
	}
	out := make([]tree.Identity, 0, min(len(auth), 4))
	for _, id := range auth {
		if tree.IsSuper(id) || (expand && tree.ExpandsAuth(id)) || namedIn(acls, id) {
			out = append(out, id)
		}
	}
	return out
}

func namedIn(acls [][]tree.ACL, id tree.Identity) bool {
	for _, acl := range acls {
		for _, a := range acl {
			if tree.Matches(a, id) {
				return true
			}
		}
	}
	return false
}
