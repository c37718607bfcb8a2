// Package tree is coordrun's replicated state machine: the znode tree with
// its stats and ACLs, and the sessions that own ephemeral nodes.
//
// Every replica applies the same transactions in the same order and must end
// in the same state, so the package is strictly deterministic: it reads no
// clock (each transaction carries the leader's timestamp), draws no random
// numbers, never lets map iteration order leak into results, and does no I/O
// beyond the io.Writer and io.Reader handed to the snapshot functions. The
// zxid of a change, passed to Apply, is decided by the caller from the raft
// log position of its entry.
//
// Semantics follow Apache ZooKeeper 3.8: error precedence, stat updates,
// sequential naming, ACL checks and multi atomicity match what its
// PrepRequestProcessor and DataTree do, so that clients observe no
// difference.
//
// A Tree is not safe for concurrent use. The raft FSM adapter guards it with
// a sync.RWMutex: Apply and SetConfigData (and swapping in a tree returned by
// ReadSnapshot) under the write lock; every other method only reads and may
// run under the read lock, WriteSnapshot included.
package tree

import (
	"maps"
	"math"
	"slices"
	"strings"
)

// Stat is a node's metadata, ZooKeeper's Stat record.
type Stat struct {
	Czxid          int64 // zxid of the create
	Mzxid          int64 // zxid of the last setData
	Ctime          int64 // ms since the epoch, of the create
	Mtime          int64 // ms since the epoch, of the last setData
	Version        int32 // number of setData
	Cversion       int32 // number of child creates
	Aversion       int32 // number of setACL
	EphemeralOwner int64 // owning session, containerOwner, or 0
	DataLength     int32
	NumChildren    int32
	Pzxid          int64 // zxid of the last child create or delete
}

// containerOwner is the EphemeralOwner ZooKeeper stores for container nodes
// (EphemeralType.CONTAINER_EPHEMERAL_OWNER).
const containerOwner int64 = math.MinInt64

// isEphemeralOwner reports whether owner marks a session's ephemeral node.
// Session ids are always positive, so containers (MinInt64) and persistent
// nodes (0) are told apart from them.
func isEphemeralOwner(owner int64) bool { return owner > 0 }

type node struct {
	data     []byte
	acl      *aclEntry
	stat     Stat
	children map[string]struct{} // names, not paths; nil when empty
}

type session struct {
	timeout    int32
	password   []byte
	ephemerals map[string]struct{} // paths
}

// SessionInfo describes a live session.
type SessionInfo struct {
	ID       int64
	Timeout  int32 // negotiated timeout in ms
	Password []byte
}

// Tree is the replicated state. The zero value is not usable; call New or
// ReadSnapshot. It is not safe for concurrent use; see the package comment
// for the locking the caller must provide.
type Tree struct {
	nodes       map[string]*node
	sessions    map[int64]*session
	nextSession int64 // next session id to hand out; 0 until the first session
	acls        map[string]*aclEntry
	dataSize    int64               // sum over nodes of len(path)+len(data)
	ephemerals  int                 // number of session-owned nodes
	quotas      map[string]struct{} // paths with a ZooKeeper quota (quota.go)

	// Per-Apply scratch space, reused to avoid allocation.
	undo    []func()
	logging bool
	emptied []string // containers that lost a child during this txn
	// quotaBase holds stats nodes' data from before this txn; passed the
	// quotas its writes went past.
	quotaBase map[string][]byte
	passed    []QuotaPassed
}

func newEmpty() *Tree {
	return &Tree{
		nodes:    make(map[string]*node),
		sessions: make(map[int64]*session),
		acls:     make(map[string]*aclEntry),
		quotas:   make(map[string]struct{}),
	}
}

// New returns the initial state of every ensemble: "/", "/zookeeper",
// "/zookeeper/quota" and "/zookeeper/config", all with zero stats. As in
// ZooKeeper, /zookeeper/config is world-readable only and its Aversion is -1
// (ZooKeeper installs its ACL through setACL with version -1), and the
// initial links bump no cversion.
func New() *Tree {
	t := newEmpty()
	// Empty, not null, data: ZooKeeper's system nodes hold byte[0], and
	// clients such as Curator read /zookeeper/config expecting a buffer.
	root := &node{acl: t.retainACL(newACLEntry(OpenACL)), data: []byte{}}
	t.nodes[rootPath] = root
	t.dataSize = int64(len(rootPath))
	for _, p := range []string{procPath, quotaPath, configPath} {
		acl := OpenACL
		if p == configPath {
			acl = readACL
		}
		parent, name := splitPath(p)
		n := &node{acl: newACLEntry(acl), data: []byte{}}
		if p == configPath {
			n.stat.Aversion = -1
		}
		t.link(p, t.nodes[parent], name, n)
	}
	return t
}

// link inserts n at path under parent, maintaining the parent's child set
// and NumChildren, the counters, ACL references and the owning session's
// ephemeral set. It does not touch the parent's cversion or pzxid.
func (t *Tree) link(path string, parent *node, name string, n *node) {
	n.acl = t.retainACL(n.acl)
	t.nodes[path] = n
	if parent.children == nil {
		parent.children = make(map[string]struct{})
	}
	parent.children[name] = struct{}{}
	parent.stat.NumChildren++
	t.dataSize += int64(len(path) + len(n.data))
	if isEphemeralOwner(n.stat.EphemeralOwner) {
		t.ephemerals++
		if s := t.sessions[n.stat.EphemeralOwner]; s != nil {
			s.ephemerals[path] = struct{}{}
		}
	}
}

// unlink is the exact inverse of link.
func (t *Tree) unlink(path string, parent *node, name string, n *node) {
	t.releaseACL(n.acl)
	delete(t.nodes, path)
	delete(parent.children, name)
	if len(parent.children) == 0 {
		parent.children = nil
	}
	parent.stat.NumChildren--
	t.dataSize -= int64(len(path) + len(n.data))
	if isEphemeralOwner(n.stat.EphemeralOwner) {
		t.ephemerals--
		if s := t.sessions[n.stat.EphemeralOwner]; s != nil {
			delete(s.ephemerals, path)
		}
	}
}

// SetConfigData replaces the data of /zookeeper/config, through which the
// member publishes the ensemble's membership to clients, as ZooKeeper's
// initConfigInZKDatabase does: the stat's version becomes -1 and its mzxid
// zxid, the configuration's version (0 for the one the ensemble started
// with). It is not a client write: no cversion, pzxid or mtime changes, and
// it returns the event for the watch manager rather than recording one.
// Callers must invoke it identically on every replica (the FSM does, when a
// configuration entry is applied), or replicas will diverge. b is copied.
func (t *Tree) SetConfigData(b []byte, zxid int64) Event {
	n := t.nodes[configPath]
	t.dataSize += int64(len(b) - len(n.data))
	n.data = cloneBytes(b)
	n.stat.DataLength = int32(len(n.data))
	n.stat.Version = -1
	n.stat.Mzxid = zxid
	return Event{Type: EventDataChanged, Path: configPath, ACL: n.acl.acl}
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// lookup finds a node for a read. Invalid paths simply do not exist; the
// empty path is the root, as in ZooKeeper's DataTree.
func (t *Tree) lookup(path string) (*node, error) {
	if path == "" {
		path = "/"
	}
	if n := t.nodes[path]; n != nil {
		return n, nil
	}
	return nil, ErrNoNode
}

// CheckedACL is the ACL that applying op checks now: the parent's for a
// create or delete, the node's own for setData, setACL and check. false
// when that node does not exist (apply fails the op with ErrNoNode, unless
// an earlier op of its multi creates the node). Shared with the tree: do
// not modify.
func (t *Tree) CheckedACL(op *Op) ([]ACL, bool) {
	path := op.Path
	switch op.Kind {
	case OpCreate, OpDelete:
		var ok bool
		if path, ok = parentOf(op.Path); !ok {
			return nil, false
		}
	case OpSetData, OpSetACL, OpCheck:
	default:
		return nil, false
	}
	n := t.nodes[path]
	if n == nil {
		return nil, false
	}
	return n.acl.acl, true
}

// Get returns a node's data and stat; it needs READ. The returned slice is
// shared with the tree and must not be modified; it stays valid after later
// writes because the tree replaces data rather than mutating it.
func (t *Tree) Get(path string, auth []Identity) ([]byte, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	if !permitted(n.acl.acl, PermRead, auth) {
		return nil, Stat{}, ErrNoAuth
	}
	return n.data, n.stat, nil
}

// Exists returns a node's stat. Like ZooKeeper's exists it checks no ACL.
func (t *Tree) Exists(path string) (Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return Stat{}, err
	}
	return n.stat, nil
}

// Children returns the sorted names of a node's children and its stat; it
// needs READ.
func (t *Tree) Children(path string, auth []Identity) ([]string, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	if !permitted(n.acl.acl, PermRead, auth) {
		return nil, Stat{}, ErrNoAuth
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, n.stat, nil
}

// GetACL returns a copy of a node's ACL and its stat. As in ZooKeeper 3.8 it
// needs READ or ADMIN, and a requester without ADMIN sees digest ids with
// the password hash replaced by "x" ("bob:x"), so that READ alone does not
// leak hashes that could be attacked offline.
func (t *Tree) GetACL(path string, auth []Identity) ([]ACL, Stat, error) {
	n, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	if !permitted(n.acl.acl, PermRead|PermAdmin, auth) {
		return nil, Stat{}, ErrNoAuth
	}
	out := slices.Clone(n.acl.acl)
	if !permitted(n.acl.acl, PermAdmin, auth) {
		for i, a := range out {
			if a.Scheme == schemeDigest {
				if j := strings.IndexByte(a.ID, ':'); j >= 0 {
					out[i].ID = a.ID[:j] + ":x"
				}
			}
		}
	}
	return out, n.stat, nil
}

// CheckACL reports ErrNoNode if path is absent and ErrNoAuth if auth lacks
// every bit of perm on it. The member uses it for requests whose permission
// check is not built into a read method here, e.g. getAllChildrenNumber
// (READ in ZooKeeper 3.8).
func (t *Tree) CheckACL(path string, perm int32, auth []Identity) error {
	n, err := t.lookup(path)
	if err != nil {
		return err
	}
	if !permitted(n.acl.acl, perm, auth) {
		return ErrNoAuth
	}
	return nil
}

// CheckVersion evaluates a check op without applying it: ErrNoNode, then
// ErrNoAuth without READ, then ErrBadVersion unless version is -1 or equals
// the node's version.
func (t *Tree) CheckVersion(path string, version int32, auth []Identity) error {
	n, err := t.lookup(path)
	if err != nil {
		return err
	}
	if !permitted(n.acl.acl, PermRead, auth) {
		return ErrNoAuth
	}
	if version != -1 && version != n.stat.Version {
		return ErrBadVersion
	}
	return nil
}

// AllChildrenNumber counts all descendants of path (not path itself). For
// "/" that is every node but the root, as in ZooKeeper.
func (t *Tree) AllChildrenNumber(path string) (int, error) {
	n, err := t.lookup(path)
	if err != nil {
		return 0, err
	}
	if path == rootPath {
		return len(t.nodes) - 1, nil
	}
	return t.countDescendants(path, n), nil
}

func (t *Tree) countDescendants(path string, n *node) int {
	c := len(n.children)
	for name := range n.children {
		child := joinPath(path, name)
		c += t.countDescendants(child, t.nodes[child])
	}
	return c
}

// Ephemerals returns the sorted paths of the session's ephemeral nodes that
// start with prefix. As in ZooKeeper, a prefix that is blank or "/" after
// trimming spaces selects all of them.
func (t *Tree) Ephemerals(sessionID int64, prefix string) []string {
	s := t.sessions[sessionID]
	if s == nil {
		return nil
	}
	if p := strings.TrimSpace(prefix); p == "" || p == rootPath {
		prefix = ""
	}
	out := make([]string, 0, len(s.ephemerals))
	for p := range s.ephemerals {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// SeesSession reports whether auth may read one of the session's
// ephemeral nodes: whether a client with it can tell the session exists.
func (t *Tree) SeesSession(sessionID int64, auth []Identity) bool {
	s := t.sessions[sessionID]
	if s == nil {
		return false
	}
	for p := range s.ephemerals {
		if n := t.nodes[p]; n != nil && permitted(n.acl.acl, PermRead, auth) {
			return true
		}
	}
	return false
}

// Session returns a live session. The password is a copy.
func (t *Tree) Session(id int64) (SessionInfo, bool) {
	s := t.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: id, Timeout: s.timeout, Password: cloneBytes(s.password)}, true
}

// Sessions returns every live session, sorted by id.
func (t *Tree) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(t.sessions))
	for id, s := range t.sessions {
		out = append(out, SessionInfo{ID: id, Timeout: s.timeout, Password: cloneBytes(s.password)})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// NodeCount returns the number of nodes, including "/" and the /zookeeper
// nodes. (ZooKeeper's mntr counts the root twice because it is stored under
// two keys; the member may add one for parity.)
func (t *Tree) NodeCount() int { return len(t.nodes) }

// EphemeralCount returns the number of session-owned ephemeral nodes.
func (t *Tree) EphemeralCount() int { return t.ephemerals }

// ApproximateDataSize returns the sum of path and data lengths over all
// nodes, ZooKeeper's approximate_data_size.
func (t *Tree) ApproximateDataSize() int64 { return t.dataSize }

// Clone returns an independent copy of the tree. It lets the FSM adapter
// take a raft snapshot quickly under the read lock and write it out
// (WriteSnapshot) while Apply goes on. Node data and passwords are shared,
// which is safe because the tree replaces them rather than modifying them.
func (t *Tree) Clone() *Tree {
	c := &Tree{
		nodes:       make(map[string]*node, len(t.nodes)),
		sessions:    make(map[int64]*session, len(t.sessions)),
		nextSession: t.nextSession,
		acls:        make(map[string]*aclEntry, len(t.acls)),
		dataSize:    t.dataSize,
		ephemerals:  t.ephemerals,
		quotas:      maps.Clone(t.quotas),
	}
	for k, e := range t.acls {
		c.acls[k] = &aclEntry{key: e.key, acl: e.acl, refs: e.refs}
	}
	for p, n := range t.nodes {
		nn := &node{data: n.data, acl: c.acls[n.acl.key], stat: n.stat}
		if n.children != nil {
			nn.children = maps.Clone(n.children)
		}
		c.nodes[p] = nn
	}
	for id, s := range t.sessions {
		c.sessions[id] = &session{timeout: s.timeout, password: s.password, ephemerals: maps.Clone(s.ephemerals)}
	}
	return c
}
