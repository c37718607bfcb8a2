package tree

import (
	"fmt"
	"slices"
)

// Mode is a create mode. The values are part of the log format (Txn
// encodes them), so they never change; they are numbered like ZooKeeper's
// CreateMode, but the server maps the wire's flags to them explicitly.
type Mode int32

// Create modes. ZooKeeper's TTL modes are refused with ErrUnimplemented, as
// ZooKeeper does while extended types are disabled.
const (
	ModePersistent           Mode = 0
	ModeEphemeral            Mode = 1
	ModePersistentSequential Mode = 2
	ModeEphemeralSequential  Mode = 3
	ModeContainer            Mode = 4

	ModePersistentTTL           Mode = 5
	ModePersistentSequentialTTL Mode = 6
)

func (m Mode) sequential() bool { return m == ModePersistentSequential || m == ModeEphemeralSequential }
func (m Mode) ephemeral() bool  { return m == ModeEphemeral || m == ModeEphemeralSequential }

// Precheck returns the error op fails with before the tree is consulted,
// in ZooKeeper's order (PrepRequestProcessor): for a create its mode (TTL
// modes are ErrUnimplemented, unknown ones bad arguments) and the path's
// shape (a slash, no NUL; the whole path is validated only after the
// parent has been looked up, since a sequence number is appended first),
// for a delete the path's shape and the special nodes, for the others the
// whole path; an OpFail fails with its Fail. Apply makes these checks
// first. A server makes them before proposing a lone op, to answer a
// hopeless one without a round through the log; in a multi it leaves them
// to Apply, because an earlier op that fails on the tree's state is the
// one reported.
func Precheck(op *Op) error {
	switch op.Kind {
	case OpCreate:
		switch {
		case op.Mode == ModePersistentTTL || op.Mode == ModePersistentSequentialTTL:
			return ErrUnimplemented
		case op.Mode < ModePersistent || op.Mode > ModeContainer:
			return fmt.Errorf("%w: unknown create mode %d", ErrBadArguments, op.Mode)
		}
		if _, ok := parentOf(op.Path); !ok {
			return pathError(op.Path, "no parent")
		}
	case OpDelete:
		if _, ok := parentOf(op.Path); !ok || isSpecialPath(op.Path) {
			return fmt.Errorf("%w: %q cannot be deleted", ErrBadArguments, op.Path)
		}
	case OpSetData, OpSetACL, OpCheck:
		return validatePath(op.Path)
	case OpFail:
		return op.Fail.Err()
	default:
		return fmt.Errorf("%w: unknown op kind %d", ErrBadArguments, op.Kind)
	}
	return nil
}

// OpKind selects what an Op does.
type OpKind uint8

// Op kinds.
const (
	OpCreate OpKind = iota + 1
	OpDelete
	OpSetData
	OpSetACL
	OpCheck
	// OpFail stands for an op of a multi that the server refused on terms
	// of its own before the tree was consulted (a TTL create while TTL
	// nodes are off, flags ZooKeeper does not define, an op that cannot be
	// read). It fails with Fail when the multi reaches it: ZooKeeper
	// evaluates a multi's ops in order, so an earlier op that fails on the
	// tree's state is the one reported.
	OpFail
)

// Failure is why an OpFail fails. The values are part of the log format.
type Failure uint8

// Failures.
const (
	FailBadArguments  Failure = 1
	FailUnimplemented Failure = 2
	// FailUnreadable fails the whole request as one ZooKeeper could not
	// read (MARSHALLINGERROR), rather than at the op.
	FailUnreadable Failure = 3
)

// Err is the error an op failing for f reports.
func (f Failure) Err() error {
	switch f {
	case FailUnimplemented:
		return ErrUnimplemented
	case FailUnreadable:
		return ErrUnreadable
	}
	return ErrBadArguments
}

// Op is one write, or a check, within a transaction. Which fields matter
// depends on Kind: Data for create and setData, ACL for create and setACL,
// Mode for create, Version (-1 for any) for delete, setData, setACL (against
// Aversion) and check, Fail for OpFail.
type Op struct {
	Kind    OpKind
	Path    string
	Data    []byte
	ACL     []ACL
	Mode    Mode
	Version int32
	Fail    Failure
}

// TxnKind selects what a Txn does.
type TxnKind uint8

// Transaction kinds.
const (
	TxnOps TxnKind = iota + 1
	TxnCreateSession
	TxnCloseSession
)

// Txn is one raft log entry's worth of state change, fully determined by the
// proposer so that every replica applies it identically.
type Txn struct {
	Kind     TxnKind
	Session  int64      // requesting session (TxnOps, TxnCloseSession); for TxnCloseSession the session to end; 0 for internal txns
	Time     int64      // ms since the Unix epoch, stamped by the leader; becomes ctime/mtime
	Auth     []Identity // the requester's identities, for ACL checks and "auth" expansion
	Multi    bool       // Ops form one atomic multi; otherwise Ops holds exactly one op
	Ops      []Op
	Timeout  int32  // TxnCreateSession: negotiated timeout in ms
	Password []byte // TxnCreateSession: the session password chosen by the proposer
	// EnforceQuota: refuse creates and setData past a ZooKeeper hard
	// quota (zookeeper.enforceQuota), as the proposer was configured.
	EnforceQuota bool

	// preX509: decoded from a log entry written before coordrun knew the
	// x509 scheme, which nonetheless names it. Such an entry was applied
	// with x509 ACL entries invalid, and replaying it must give the same
	// outcome on every member, whatever its snapshot point.
	preX509 bool
}

// OpResult is the outcome of one op.
type OpResult struct {
	Err  error
	Path string // the op's path; for create the created path, including any sequence suffix
	Stat Stat   // the node's stat right after the op, for create, setData and setACL
}

// Result is the outcome of a transaction.
type Result struct {
	// Err is nil on success; for a single op its error, for a multi the
	// first failing op's error.
	Err error
	// Ops holds one result per op. In a failed multi the ops before the
	// failing one have a nil Err, the failing op its error, the later ops
	// ErrRuntimeInconsistency, and nothing was changed.
	Ops []OpResult
	// SessionID is the new session's id, for TxnCreateSession.
	SessionID int64
	// Quotas lists the ZooKeeper quotas the ops went past while the
	// proposer enforced them, for the member to log as ZooKeeper does.
	Quotas []QuotaPassed
	// Events lists the changes made, in order, for the watch manager.
	Events []Event
}

// EventType is the kind of change a watch may fire for.
type EventType uint8

// Event types, each triggering the ZooKeeper watch event of the same name.
const (
	EventCreated EventType = iota + 1
	EventDeleted
	EventDataChanged
	EventChildrenChanged
)

// Event is one change made by a transaction.
type Event struct {
	Type EventType
	Path string
	// ACL is the list a watcher needs READ on to be told of the event, as
	// it stood when the change was made (ZooKeeper's DataTree passes the
	// same to its watch manager): the node's own ACL for EventCreated,
	// EventDataChanged and EventDeleted (the deleted node's last ACL), and
	// the parent's for EventChildrenChanged. Later ops of the same
	// transaction do not alter it. Shared with the tree: do not modify.
	ACL []ACL
}

// Apply applies a transaction at zxid (from its raft log position) and reports the
// outcome. Errors are part of the replicated outcome, not failures of Apply:
// every replica computes the same Result. Op data and passwords are copied,
// so the caller keeps ownership of txn.
//
// A TxnOps transaction from a non-zero Session that is not live fails as a
// whole with ErrSessionExpired, because a write that was proposed before its
// session expired must not land after the expiry; for a multi this is
// reported, as ZooKeeper does, as a failure of its first op. Session 0 marks
// internal transactions.
func (t *Tree) Apply(txn *Txn, zxid int64) Result {
	switch txn.Kind {
	case TxnOps:
		return t.applyOps(txn, zxid)
	case TxnCreateSession:
		return t.createSession(txn)
	case TxnCloseSession:
		return t.closeSession(txn, zxid)
	}
	return Result{Err: fmt.Errorf("%w: unknown transaction kind %d", ErrBadArguments, txn.Kind)}
}

func (t *Tree) createSession(txn *Txn) Result {
	if t.nextSession <= 0 {
		// Seed from the leader's clock so that ids differ from those of an
		// earlier incarnation of the ensemble; afterwards ids only grow, so
		// none is ever reused.
		t.nextSession = (txn.Time << 12) & (1<<63 - 1)
		if t.nextSession == 0 {
			t.nextSession = 1
		}
	}
	id := t.nextSession
	t.nextSession++
	t.sessions[id] = &session{
		timeout:    txn.Timeout,
		password:   cloneBytes(txn.Password),
		ephemerals: make(map[string]struct{}),
	}
	return Result{SessionID: id}
}

// closeSession deletes the session's ephemerals in path order, as
// ZooKeeper's killSession does (without permission checks), then forgets the
// session. An unknown session is a successful no-op, since expiry and an
// explicit close may both be proposed.
func (t *Tree) closeSession(txn *Txn, zxid int64) Result {
	s := t.sessions[txn.Session]
	if s == nil {
		return Result{}
	}
	paths := make([]string, 0, len(s.ephemerals))
	for p := range s.ephemerals {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var events []Event
	for _, p := range paths {
		parentPath, name := splitPath(p)
		events = t.deleteNode(p, t.nodes[parentPath], parentPath, name, t.nodes[p], zxid, events)
	}
	events = t.cleanContainers(zxid, events)
	delete(t.sessions, txn.Session)
	return Result{Events: events}
}

func (t *Tree) applyOps(txn *Txn, zxid int64) Result {
	res := Result{Ops: make([]OpResult, len(txn.Ops))}
	for i := range txn.Ops {
		res.Ops[i].Path = txn.Ops[i].Path
	}
	if !txn.Multi && len(txn.Ops) != 1 {
		res.Err = fmt.Errorf("%w: a non-multi transaction needs exactly one op, got %d", ErrBadArguments, len(txn.Ops))
		for i := range res.Ops {
			res.Ops[i].Err = res.Err
		}
		return res
	}
	if txn.Session != 0 && t.sessions[txn.Session] == nil {
		res.Err = ErrSessionExpired
		for i := range res.Ops {
			res.Ops[i].Err = ErrRuntimeInconsistency
		}
		if len(res.Ops) > 0 {
			res.Ops[0].Err = ErrSessionExpired
		}
		return res
	}

	t.logging = txn.Multi
	t.undo = t.undo[:0]
	t.emptied = t.emptied[:0]
	t.passed = nil
	if txn.Multi && t.quotaBase == nil {
		t.quotaBase = make(map[string][]byte)
	}
	var events []Event
	failed := -1
	for i := range txn.Ops {
		var err error
		events, err = t.applyOp(txn, &txn.Ops[i], &res.Ops[i], zxid, events)
		if err != nil {
			res.Ops[i].Err = err
			res.Err = err
			failed = i
			break
		}
	}
	if failed >= 0 {
		// Roll back; ops validate fully before mutating, so only earlier
		// ops of a multi have left anything behind.
		for i := len(t.undo) - 1; i >= 0; i-- {
			t.undo[i]()
		}
		for i := range failed {
			res.Ops[i] = OpResult{Path: txn.Ops[i].Path}
		}
		for i := failed + 1; i < len(res.Ops); i++ {
			res.Ops[i].Err = ErrRuntimeInconsistency
		}
		events = nil
		clear(t.emptied)
		t.emptied = t.emptied[:0]
	} else {
		events = t.cleanContainers(zxid, events)
	}
	clear(t.undo)
	t.undo = t.undo[:0]
	clear(t.quotaBase)
	t.logging = false
	res.Events = events
	res.Quotas, t.passed = t.passed, nil
	return res
}

func (t *Tree) record(f func()) {
	if t.logging {
		t.undo = append(t.undo, f)
	}
}

func (t *Tree) applyOp(txn *Txn, op *Op, r *OpResult, zxid int64, events []Event) ([]Event, error) {
	switch op.Kind {
	case OpCreate:
		return t.create(txn, op, r, zxid, events)
	case OpDelete:
		return t.delete(txn, op, zxid, events)
	case OpSetData:
		return t.setData(txn, op, r, zxid, events)
	case OpSetACL:
		return events, t.setACL(txn, op, r)
	case OpCheck:
		return events, t.check(txn, op)
	}
	return events, Precheck(op)
}

// create follows PrepRequestProcessor.pRequest2TxnCreate. Error precedence:
// mode, the path's shape (Precheck), session, ACL list, parent, CREATE
// permission, the whole path with any sequence suffix, existence,
// ephemeral parent. The parent is what precedes the last slash, so a path
// ZooKeeper would not create may still fail on its parent first (e.g.
// "/a/.." with /a missing is NoNode).
func (t *Tree) create(txn *Txn, op *Op, r *OpResult, zxid int64, events []Event) ([]Event, error) {
	if err := Precheck(op); err != nil {
		return events, err
	}
	seq := op.Mode.sequential()
	owner := int64(0)
	switch {
	case op.Mode == ModeContainer:
		owner = containerOwner
	case op.Mode.ephemeral():
		if txn.Session == 0 || t.sessions[txn.Session] == nil {
			return events, ErrSessionExpired
		}
		owner = txn.Session
	}
	acl, err := fixupACLSchemes(op.ACL, txn.Auth, !txn.preX509)
	if err != nil {
		return events, err
	}
	// ZooKeeper takes the parent of "/" to be the root itself, so that
	// create fails with NodeExists (or, sequentially, makes a child).
	parentPath, _ := parentOf(op.Path)
	parent := t.nodes[parentPath]
	if parent == nil {
		return events, ErrNoNode
	}
	if !permitted(parent.acl.acl, PermCreate, txn.Auth) {
		return events, ErrNoAuth
	}
	path := op.Path
	if seq {
		path = fmt.Sprintf("%s%010d", path, parent.stat.Cversion)
	}
	if err := validatePath(path); err != nil {
		return events, err
	}
	if t.nodes[path] != nil {
		return events, ErrNodeExists
	}
	if isEphemeralOwner(parent.stat.EphemeralOwner) {
		return events, ErrNoChildrenForEphemerals
	}
	if err := t.checkQuota(txn, path, int64(len(op.Data)), 1); err != nil {
		return events, err
	}

	_, name := splitPath(path)
	data := cloneBytes(op.Data)
	n := &node{
		data: data,
		acl:  t.internACL(acl),
		stat: Stat{
			Czxid:          zxid,
			Mzxid:          zxid,
			Ctime:          txn.Time,
			Mtime:          txn.Time,
			EphemeralOwner: owner,
			DataLength:     int32(len(data)),
			Pzxid:          zxid,
		},
	}
	old := parent.stat
	t.link(path, parent, name, n)
	parent.stat.Cversion++
	parent.stat.Pzxid = zxid
	t.record(func() {
		t.unlink(path, parent, name, n)
		parent.stat = old
	})
	t.quotaCreated(path, n)
	r.Path = path
	r.Stat = n.stat
	return append(events,
		Event{Type: EventCreated, Path: path, ACL: n.acl.acl},
		Event{Type: EventChildrenChanged, Path: parentPath, ACL: parent.acl.acl}), nil
}

// delete follows PrepRequestProcessor's delete case. Error precedence:
// the path's shape and the special nodes (Precheck), parent, DELETE
// permission on the parent, node, version, children. As in ZooKeeper the
// path is never validated as a whole: one no node could have is NoNode.
func (t *Tree) delete(txn *Txn, op *Op, zxid int64, events []Event) ([]Event, error) {
	if err := Precheck(op); err != nil {
		return events, err
	}
	parentPath, _ := parentOf(op.Path)
	parent := t.nodes[parentPath]
	if parent == nil {
		return events, ErrNoNode
	}
	if !permitted(parent.acl.acl, PermDelete, txn.Auth) {
		return events, ErrNoAuth
	}
	n := t.nodes[op.Path]
	if n == nil {
		return events, ErrNoNode
	}
	if op.Version != -1 && op.Version != n.stat.Version {
		return events, ErrBadVersion
	}
	if n.stat.NumChildren > 0 {
		return events, ErrNotEmpty
	}
	_, name := splitPath(op.Path)
	return t.deleteNode(op.Path, parent, parentPath, name, n, zxid, events), nil
}

// deleteNode removes a childless node. As in ZooKeeper 3.8's DataTree, the
// parent's pzxid moves to zxid but its cversion is left alone: cversion
// counts child creations, which keeps sequential names increasing.
func (t *Tree) deleteNode(path string, parent *node, parentPath, name string, n *node, zxid int64, events []Event) []Event {
	old := parent.stat
	t.unlink(path, parent, name, n)
	parent.stat.Pzxid = zxid
	if parent.stat.EphemeralOwner == containerOwner && parent.stat.NumChildren == 0 {
		t.emptied = append(t.emptied, parentPath)
	}
	t.record(func() {
		// The retained ACL entry may have been forgotten meanwhile;
		// link re-interns it.
		t.link(path, parent, name, n)
		parent.stat = old
	})
	t.quotaDeleted(path, n)
	return append(events,
		Event{Type: EventDeleted, Path: path, ACL: n.acl.acl},
		Event{Type: EventChildrenChanged, Path: parentPath, ACL: parent.acl.acl})
}

// cleanContainers deletes the containers that lost their last child during
// this transaction, cascading to container parents. ZooKeeper's
// ContainerManager does the same from a timer (deleting containers that had
// a child and now have none); doing it at the end of the transaction keeps
// the state machine clock-free while letting a multi refill a container it
// emptied.
func (t *Tree) cleanContainers(zxid int64, events []Event) []Event {
	for i := 0; i < len(t.emptied); i++ {
		p := t.emptied[i]
		n := t.nodes[p]
		if n == nil || n.stat.EphemeralOwner != containerOwner || n.stat.NumChildren != 0 {
			continue
		}
		parentPath, name := splitPath(p)
		events = t.deleteNode(p, t.nodes[parentPath], parentPath, name, n, zxid, events)
	}
	clear(t.emptied)
	t.emptied = t.emptied[:0]
	return events
}

// setData follows PrepRequestProcessor's setData case: node, WRITE
// permission, version.
func (t *Tree) setData(txn *Txn, op *Op, r *OpResult, zxid int64, events []Event) ([]Event, error) {
	if err := Precheck(op); err != nil {
		return events, err
	}
	n := t.nodes[op.Path]
	if n == nil {
		return events, ErrNoNode
	}
	if !permitted(n.acl.acl, PermWrite, txn.Auth) {
		return events, ErrNoAuth
	}
	// ZooKeeper checks the quota between the ACL and the version.
	if err := t.checkQuota(txn, op.Path, int64(len(op.Data)-len(n.data)), 0); err != nil {
		return events, err
	}
	if op.Version != -1 && op.Version != n.stat.Version {
		return events, ErrBadVersion
	}
	oldData, oldStat := n.data, n.stat
	n.data = cloneBytes(op.Data)
	t.dataSize += int64(len(n.data) - len(oldData))
	n.stat.Version++
	n.stat.Mzxid = zxid
	n.stat.Mtime = txn.Time
	n.stat.DataLength = int32(len(n.data))
	t.record(func() {
		t.dataSize += int64(len(oldData) - len(n.data))
		n.data, n.stat = oldData, oldStat
	})
	if q, ok := t.quotaPrefix(op.Path); ok {
		t.addQuotaStats(q, int64(len(n.data)-len(oldData)), 0)
	}
	r.Stat = n.stat
	return append(events, Event{Type: EventDataChanged, Path: op.Path, ACL: n.acl.acl}), nil
}

// setACL follows PrepRequestProcessor's setACL case, where the ACL list is
// checked before the node is looked up: ACL list, node, ADMIN permission,
// aversion.
func (t *Tree) setACL(txn *Txn, op *Op, r *OpResult) error {
	if err := Precheck(op); err != nil {
		return err
	}
	acl, err := fixupACLSchemes(op.ACL, txn.Auth, !txn.preX509)
	if err != nil {
		return err
	}
	n := t.nodes[op.Path]
	if n == nil {
		return ErrNoNode
	}
	if !permitted(n.acl.acl, PermAdmin, txn.Auth) {
		return ErrNoAuth
	}
	if op.Version != -1 && op.Version != n.stat.Aversion {
		return ErrBadVersion
	}
	oldACL, oldStat := n.acl, n.stat
	n.acl = t.retainACL(t.internACL(acl))
	t.releaseACL(oldACL)
	n.stat.Aversion++
	t.record(func() {
		t.releaseACL(n.acl)
		n.acl = t.retainACL(oldACL)
		n.stat = oldStat
	})
	r.Stat = n.stat
	return nil
}

// check follows PrepRequestProcessor's check case: node, READ permission,
// version.
func (t *Tree) check(txn *Txn, op *Op) error {
	if err := Precheck(op); err != nil {
		return err
	}
	return t.CheckVersion(op.Path, op.Version, txn.Auth)
}
