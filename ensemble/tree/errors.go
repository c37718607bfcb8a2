package tree

import "errors"

// Sentinel errors returned by Apply (in Result and OpResult) and by the read
// methods. Each corresponds to one ZooKeeper KeeperException code so the
// member can translate it to a wire error code with errors.Is. Validation
// failures wrap ErrBadArguments with a reason; all other errors are returned
// unwrapped, so that applying a transaction allocates nothing for them.
var (
	// ErrNoNode: the node (or, for create, its parent) does not exist.
	ErrNoNode = errors.New("node does not exist")
	// ErrNodeExists: create of a path that is already taken.
	ErrNodeExists = errors.New("node already exists")
	// ErrBadVersion: the expected version does not match the node's.
	ErrBadVersion = errors.New("version conflict")
	// ErrNotEmpty: delete of a node that still has children.
	ErrNotEmpty = errors.New("node has children")
	// ErrNoChildrenForEphemerals: create under an ephemeral node.
	ErrNoChildrenForEphemerals = errors.New("ephemeral nodes may not have children")
	// ErrNoAuth: the requester's identities lack the required permission.
	ErrNoAuth = errors.New("not authorized")
	// ErrInvalidACL: an ACL list given to create or setACL is malformed or
	// cannot be expanded.
	ErrInvalidACL = errors.New("invalid ACL")
	// ErrBadArguments: an invalid path, create mode, or transaction shape.
	ErrBadArguments = errors.New("bad arguments")
	// ErrSessionExpired: the requesting session is not (or no longer) live.
	ErrSessionExpired = errors.New("session expired")
	// ErrRuntimeInconsistency marks the ops of a failed multi that follow the
	// failing op; they were never attempted.
	ErrRuntimeInconsistency = errors.New("runtime inconsistency")
	// ErrUnimplemented: a request ZooKeeper 3.8 refuses by default, such as
	// TTL create modes.
	ErrUnimplemented = errors.New("unimplemented")
	// ErrUnreadable fails a multi as a whole where ZooKeeper 3.8 fails to
	// process it (MARSHALLINGERROR): a plain create with a TTL mode.
	ErrUnreadable = errors.New("request could not be processed")
	// ErrQuotaExceeded: a create or setData past a ZooKeeper hard quota
	// under /zookeeper/quota, while the proposer enforces them.
	ErrQuotaExceeded = errors.New("quota exceeded")
)
