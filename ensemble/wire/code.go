package wire

import "strconv"

// Code is a ZooKeeper error code as carried in ReplyHeader.Err and multi
// results. It implements error, so errors.Is(err, ErrNoNode) works both on a
// bare Code and on errors that wrap one.
type Code int32

// Error codes, numbered as in ZooKeeper's KeeperException.Code.
const (
	OK                              Code = 0
	ErrSystemError                  Code = -1
	ErrRuntimeInconsistency         Code = -2
	ErrDataInconsistency            Code = -3
	ErrConnectionLoss               Code = -4
	ErrMarshallingError             Code = -5
	ErrUnimplemented                Code = -6
	ErrOperationTimeout             Code = -7
	ErrBadArguments                 Code = -8
	ErrUnknownSession               Code = -12
	ErrNewConfigNoQuorum            Code = -13
	ErrReconfigInProgress           Code = -14
	ErrAPIError                     Code = -100
	ErrNoNode                       Code = -101
	ErrNoAuth                       Code = -102
	ErrBadVersion                   Code = -103
	ErrNoChildrenForEphemerals      Code = -108
	ErrNodeExists                   Code = -110
	ErrNotEmpty                     Code = -111
	ErrSessionExpired               Code = -112
	ErrInvalidCallback              Code = -113
	ErrInvalidACL                   Code = -114
	ErrAuthFailed                   Code = -115
	ErrSessionMoved                 Code = -118
	ErrNotReadOnly                  Code = -119
	ErrEphemeralOnLocalSession      Code = -120
	ErrNoWatcher                    Code = -121
	ErrRequestTimeout               Code = -122
	ErrReconfigDisabled             Code = -123
	ErrSessionClosedRequireSASLAuth Code = -124
	ErrQuotaExceeded                Code = -125
	ErrThrottled                    Code = -127
)

// Err returns nil for OK and c otherwise, so a reply header's code can be
// returned directly as a Go error.
func (c Code) Err() error {
	if c == OK {
		return nil
	}
	return c
}

func (c Code) Error() string {
	switch c {
	case OK:
		return "zk: ok"
	case ErrSystemError:
		return "zk: system error"
	case ErrRuntimeInconsistency:
		return "zk: runtime inconsistency"
	case ErrDataInconsistency:
		return "zk: data inconsistency"
	case ErrConnectionLoss:
		return "zk: connection loss"
	case ErrMarshallingError:
		return "zk: marshalling error"
	case ErrUnimplemented:
		return "zk: unimplemented"
	case ErrOperationTimeout:
		return "zk: operation timeout"
	case ErrBadArguments:
		return "zk: bad arguments"
	case ErrUnknownSession:
		return "zk: unknown session"
	case ErrNewConfigNoQuorum:
		return "zk: no quorum of new config is connected and up to date"
	case ErrReconfigInProgress:
		return "zk: another reconfiguration is in progress"
	case ErrAPIError:
		return "zk: api error"
	case ErrNoNode:
		return "zk: node does not exist"
	case ErrNoAuth:
		return "zk: not authenticated"
	case ErrBadVersion:
		return "zk: version conflict"
	case ErrNoChildrenForEphemerals:
		return "zk: ephemeral nodes may not have children"
	case ErrNodeExists:
		return "zk: node already exists"
	case ErrNotEmpty:
		return "zk: node has children"
	case ErrSessionExpired:
		return "zk: session has been expired by the server"
	case ErrInvalidCallback:
		return "zk: invalid callback specified"
	case ErrInvalidACL:
		return "zk: invalid ACL specified"
	case ErrAuthFailed:
		return "zk: client authentication failed"
	case ErrSessionMoved:
		return "zk: session moved to another server, so operation is ignored"
	case ErrNotReadOnly:
		return "zk: state-changing request is passed to read-only server"
	case ErrEphemeralOnLocalSession:
		return "zk: attempt to create ephemeral node on a local session"
	case ErrNoWatcher:
		return "zk: no such watcher"
	case ErrRequestTimeout:
		return "zk: request not completed within max allowed time"
	case ErrReconfigDisabled:
		return "zk: reconfiguration feature is disabled"
	case ErrSessionClosedRequireSASLAuth:
		return "zk: session closed because client failed to authenticate"
	case ErrQuotaExceeded:
		return "zk: quota has exceeded"
	case ErrThrottled:
		return "zk: operation throttled due to high load"
	}
	return "zk: unknown error code " + strconv.Itoa(int(c))
}
