// Package zk is ZooKeeper's request semantics over ensemble/tree: it
// decodes a client request, plans a write as a tree transaction, builds
// the reply from the transaction's outcome, and runs a read against a tree.
//
// It holds no sockets, locks or raft and reads no clock. What a request
// leaves for the member to do comes back as data, the way etcd's raft hands
// out its Ready: a write's Plan carries the transaction to propose and what
// its reply needs; a read's Result carries the reply frame, the watches to
// register and the notifications to send at once. The member decides where
// a transaction is proposed, which lock a read runs under, and when a reply
// may leave.
//
// Validation lives here once, in request order: what ZooKeeper checks of a
// lone write before the tree is consulted (the opcode and flags, data size,
// and the path as tree.Precheck sees it) is answered without a round
// through the log; tree.Precheck is called, not repeated. A multi's ops are
// left to the tree in order, since ZooKeeper reports the first op to fail.
package zk

import (
	"errors"
	"math"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Session is who asks: a session and the identities its connection holds
// at the time the request was read.
type Session struct {
	ID   int64
	Auth []tree.Identity
}

// Limits are the member's bounds on what a write may carry.
type Limits struct {
	MaxData int // largest znode data accepted, in bytes
	// EnforceQuota makes writes past a ZooKeeper hard quota fail with
	// QUOTAEXCEEDED (zookeeper.enforceQuota); the tree decides, with the
	// flag the txn carries.
	EnforceQuota bool
}

// SchemeX509 is the ACL scheme of client certificate identities.
const SchemeX509 = "x509"

// CodeOf maps the tree's errors to ZooKeeper's error codes. The tree knows
// nothing of the protocol; this table is the one place they meet.
func CodeOf(err error) wire.Code {
	switch {
	case err == nil:
		return wire.OK
	case errors.Is(err, tree.ErrNoNode):
		return wire.ErrNoNode
	case errors.Is(err, tree.ErrNodeExists):
		return wire.ErrNodeExists
	case errors.Is(err, tree.ErrBadVersion):
		return wire.ErrBadVersion
	case errors.Is(err, tree.ErrNotEmpty):
		return wire.ErrNotEmpty
	case errors.Is(err, tree.ErrNoChildrenForEphemerals):
		return wire.ErrNoChildrenForEphemerals
	case errors.Is(err, tree.ErrNoAuth):
		return wire.ErrNoAuth
	case errors.Is(err, tree.ErrInvalidACL):
		return wire.ErrInvalidACL
	case errors.Is(err, tree.ErrBadArguments):
		return wire.ErrBadArguments
	case errors.Is(err, tree.ErrSessionExpired):
		return wire.ErrSessionExpired
	case errors.Is(err, tree.ErrRuntimeInconsistency):
		return wire.ErrRuntimeInconsistency
	case errors.Is(err, tree.ErrUnimplemented):
		return wire.ErrUnimplemented
	case errors.Is(err, tree.ErrUnreadable):
		return wire.ErrMarshallingError
	case errors.Is(err, tree.ErrQuotaExceeded):
		return wire.ErrQuotaExceeded
	}
	var c wire.Code
	if errors.As(err, &c) {
		return c
	}
	return wire.ErrSystemError
}

// StatOf is a node's stat as clients see it.
func StatOf(s tree.Stat) wire.Stat {
	if s.EphemeralOwner == math.MinInt64 {
		// Containers are marked internally with a reserved owner, but
		// ZooKeeper shows clients 0 for them.
		s.EphemeralOwner = 0
	}
	return wire.Stat{
		Czxid: s.Czxid, Mzxid: s.Mzxid, Ctime: s.Ctime, Mtime: s.Mtime,
		// The tree counts child creations (sequence numbers come from
		// that); clients see ZooKeeper's cversion, which also counts
		// deletions: creations*2 - children.
		Version: s.Version, Cversion: 2*s.Cversion - s.NumChildren, Aversion: s.Aversion,
		EphemeralOwner: s.EphemeralOwner, DataLength: s.DataLength,
		NumChildren: s.NumChildren, Pzxid: s.Pzxid,
	}
}

// ACLsOf is an ACL list as clients see it.
func ACLsOf(a []tree.ACL) []wire.ACL {
	out := make([]wire.ACL, len(a))
	for i, x := range a {
		out[i] = wire.ACL{Perms: x.Perms, ID: wire.ID{Scheme: x.Scheme, ID: x.ID}}
	}
	return out
}

// TreeACLs is a client's ACL list as the tree takes it.
func TreeACLs(a []wire.ACL) []tree.ACL {
	out := make([]tree.ACL, len(a))
	for i, x := range a {
		out[i] = tree.ACL{Perms: x.Perms, Scheme: x.ID.Scheme, ID: x.ID.ID}
	}
	return out
}

// CreateMode maps a create request's flags (ZooKeeper's CreateMode) to the
// tree's mode, and reports false for flags ZooKeeper does not define. The
// two enums are numbered alike, but the tree's values are part of its log
// format and the wire's are ZooKeeper's, so neither is derived from the
// other.
func CreateMode(flags int32) (tree.Mode, bool) {
	switch flags {
	case wire.FlagPersistent:
		return tree.ModePersistent, true
	case wire.FlagEphemeral:
		return tree.ModeEphemeral, true
	case wire.FlagPersistentSequential:
		return tree.ModePersistentSequential, true
	case wire.FlagEphemeralSequential:
		return tree.ModeEphemeralSequential, true
	case wire.FlagContainer:
		return tree.ModeContainer, true
	case wire.FlagPersistentWithTTL:
		return tree.ModePersistentTTL, true
	case wire.FlagPersistentSequentialWithTTL:
		return tree.ModePersistentSequentialTTL, true
	}
	return 0, false
}
