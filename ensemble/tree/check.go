package tree

import "fmt"

// Check verifies the tree's invariants and reports the first violation. It
// is O(nodes) and meant for tests and for vetting a freshly loaded snapshot:
//
//   - the root and the /zookeeper nodes exist; every other path is valid,
//     its parent exists and lists it, and every listed child exists;
//   - NumChildren and DataLength match the child set and data;
//   - an ephemeral node's owner is a live session that lists it, every
//     listed ephemeral exists with that owner, and ephemerals have no
//     children; owners are 0, a session id, or the container marker;
//   - czxid <= mzxid and czxid <= pzxid; a child's czxid is at most its
//     parent's pzxid; version and cversion are not negative (but
//     /zookeeper/config's version, which ZooKeeper sets to -1);
//   - the ACL intern table's reference counts match the nodes using it;
//   - the data size and ephemeral counters match, and every session id is
//     below the next one to be handed out.
func (t *Tree) Check() error {
	for _, p := range []string{rootPath, procPath, quotaPath, configPath} {
		if t.nodes[p] == nil {
			return fmt.Errorf("system node %s missing", p)
		}
	}
	var size int64
	ephemerals := 0
	refs := make(map[*aclEntry]int)
	for p, n := range t.nodes {
		size += int64(len(p) + len(n.data))
		if n.acl == nil {
			return fmt.Errorf("%s: no ACL", p)
		}
		refs[n.acl]++
		if p != rootPath {
			if err := validatePath(p); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			parentPath, name := splitPath(p)
			parent := t.nodes[parentPath]
			if parent == nil {
				return fmt.Errorf("%s: parent missing", p)
			}
			if _, ok := parent.children[name]; !ok {
				return fmt.Errorf("%s: not listed by its parent", p)
			}
			if n.stat.Czxid > parent.stat.Pzxid {
				return fmt.Errorf("%s: czxid %d after parent's pzxid %d", p, n.stat.Czxid, parent.stat.Pzxid)
			}
		}
		if int(n.stat.NumChildren) != len(n.children) {
			return fmt.Errorf("%s: NumChildren %d but %d children", p, n.stat.NumChildren, len(n.children))
		}
		for name := range n.children {
			if name == "" || t.nodes[joinPath(p, name)] == nil {
				return fmt.Errorf("%s: lists missing child %q", p, name)
			}
		}
		if int(n.stat.DataLength) != len(n.data) {
			return fmt.Errorf("%s: DataLength %d but %d bytes", p, n.stat.DataLength, len(n.data))
		}
		switch owner := n.stat.EphemeralOwner; {
		case isEphemeralOwner(owner):
			ephemerals++
			s := t.sessions[owner]
			if s == nil {
				return fmt.Errorf("%s: owner session %d missing", p, owner)
			}
			if _, ok := s.ephemerals[p]; !ok {
				return fmt.Errorf("%s: not listed by session %d", p, owner)
			}
			if len(n.children) != 0 {
				return fmt.Errorf("%s: ephemeral with children", p)
			}
		case owner != 0 && owner != containerOwner:
			return fmt.Errorf("%s: bad ephemeral owner %d", p, owner)
		}
		if p == rootPath && n.stat.EphemeralOwner != 0 {
			return fmt.Errorf("root is not persistent")
		}
		s := &n.stat
		if s.Czxid > s.Mzxid || s.Czxid > s.Pzxid {
			return fmt.Errorf("%s: zxids out of order (c %d, m %d, p %d)", p, s.Czxid, s.Mzxid, s.Pzxid)
		}
		if s.Version < 0 && !(p == configPath && s.Version == -1) || s.Cversion < 0 {
			return fmt.Errorf("%s: negative version", p)
		}
	}
	if size != t.dataSize {
		return fmt.Errorf("data size %d, counted %d", t.dataSize, size)
	}
	if ephemerals != t.ephemerals {
		return fmt.Errorf("ephemeral count %d, counted %d", t.ephemerals, ephemerals)
	}
	if err := t.checkQuotas(); err != nil {
		return err
	}
	if len(refs) != len(t.acls) {
		return fmt.Errorf("%d interned ACLs, %d in use", len(t.acls), len(refs))
	}
	for e, c := range refs {
		if t.acls[e.key] != e || e.refs != c {
			return fmt.Errorf("ACL entry %v: %d references counted, %d recorded", e.acl, c, e.refs)
		}
	}
	for id, s := range t.sessions {
		if id <= 0 || id >= t.nextSession {
			return fmt.Errorf("session %d outside (0, %d)", id, t.nextSession)
		}
		for p := range s.ephemerals {
			n := t.nodes[p]
			if n == nil || n.stat.EphemeralOwner != id {
				return fmt.Errorf("session %d lists %s, which it does not own", id, p)
			}
		}
	}
	return nil
}
