package wire

// Opcodes carried in RequestHeader.Opcode (and in MultiHeader.Type, where
// OpError marks a failed operation).
const (
	OpNotification         int32 = 0
	OpCreate               int32 = 1
	OpDelete               int32 = 2
	OpExists               int32 = 3
	OpGetData              int32 = 4
	OpSetData              int32 = 5
	OpGetACL               int32 = 6
	OpSetACL               int32 = 7
	OpGetChildren          int32 = 8
	OpSync                 int32 = 9
	OpPing                 int32 = 11
	OpGetChildren2         int32 = 12
	OpCheck                int32 = 13
	OpMulti                int32 = 14
	OpCreate2              int32 = 15
	OpReconfig             int32 = 16
	OpCheckWatches         int32 = 17
	OpRemoveWatches        int32 = 18
	OpCreateContainer      int32 = 19
	OpDeleteContainer      int32 = 20
	OpCreateTTL            int32 = 21
	OpMultiRead            int32 = 22
	OpAuth                 int32 = 100
	OpSetWatches           int32 = 101
	OpSASL                 int32 = 102
	OpGetEphemerals        int32 = 103
	OpGetAllChildrenNumber int32 = 104
	OpSetWatches2          int32 = 105
	OpAddWatch             int32 = 106
	OpWhoAmI               int32 = 107
	OpCreateSession        int32 = -10
	OpCloseSession         int32 = -11
	OpError                int32 = -1
)

// OpName returns the name ZooKeeper uses for op. Unknown opcodes all map to
// "unknown" so that a hostile client cannot blow up the cardinality of a
// metric labelled by opcode.
func OpName(op int32) string {
	switch op {
	case OpNotification:
		return "notification"
	case OpCreate:
		return "create"
	case OpDelete:
		return "delete"
	case OpExists:
		return "exists"
	case OpGetData:
		return "getData"
	case OpSetData:
		return "setData"
	case OpGetACL:
		return "getACL"
	case OpSetACL:
		return "setACL"
	case OpGetChildren:
		return "getChildren"
	case OpSync:
		return "sync"
	case OpPing:
		return "ping"
	case OpGetChildren2:
		return "getChildren2"
	case OpCheck:
		return "check"
	case OpMulti:
		return "multi"
	case OpCreate2:
		return "create2"
	case OpReconfig:
		return "reconfig"
	case OpCheckWatches:
		return "checkWatches"
	case OpRemoveWatches:
		return "removeWatches"
	case OpCreateContainer:
		return "createContainer"
	case OpDeleteContainer:
		return "deleteContainer"
	case OpCreateTTL:
		return "createTTL"
	case OpMultiRead:
		return "multiRead"
	case OpAuth:
		return "auth"
	case OpSetWatches:
		return "setWatches"
	case OpSASL:
		return "sasl"
	case OpGetEphemerals:
		return "getEphemerals"
	case OpGetAllChildrenNumber:
		return "getAllChildrenNumber"
	case OpSetWatches2:
		return "setWatches2"
	case OpAddWatch:
		return "addWatch"
	case OpWhoAmI:
		return "whoAmI"
	case OpCreateSession:
		return "createSession"
	case OpCloseSession:
		return "closeSession"
	case OpError:
		return "error"
	}
	return "unknown"
}

// Reserved xids. Replies with these xids are not answers to a numbered
// request, so clients dispatch them before matching pending requests.
const (
	XidNotification int32 = -1
	XidPing         int32 = -2
	XidAuth         int32 = -4
	XidSetWatches   int32 = -8
)

// Watch event types (WatcherEvent.Type).
const (
	EventNone                   int32 = -1
	EventNodeCreated            int32 = 1
	EventNodeDeleted            int32 = 2
	EventNodeDataChanged        int32 = 3
	EventNodeChildrenChanged    int32 = 4
	EventDataWatchRemoved       int32 = 5
	EventChildWatchRemoved      int32 = 6
	EventPersistentWatchRemoved int32 = 7
)

// Session states (WatcherEvent.State).
const (
	StateDisconnected      int32 = 0
	StateSyncConnected     int32 = 3
	StateAuthFailed        int32 = 4
	StateConnectedReadOnly int32 = 5
	StateSaslAuthenticated int32 = 6
	StateExpired           int32 = -112
	StateClosed            int32 = 7
)

// ACL permission bits (ACL.Perms).
const (
	PermRead   int32 = 1 << 0
	PermWrite  int32 = 1 << 1
	PermCreate int32 = 1 << 2
	PermDelete int32 = 1 << 3
	PermAdmin  int32 = 1 << 4
	PermAll    int32 = PermRead | PermWrite | PermCreate | PermDelete | PermAdmin
)

// Create modes (CreateRequest.Flags).
const (
	FlagPersistent                  int32 = 0
	FlagEphemeral                   int32 = 1
	FlagPersistentSequential        int32 = 2
	FlagEphemeralSequential         int32 = 3
	FlagContainer                   int32 = 4
	FlagPersistentWithTTL           int32 = 5
	FlagPersistentSequentialWithTTL int32 = 6
)

// AddWatchRequest modes.
const (
	AddWatchPersistent          int32 = 0
	AddWatchPersistentRecursive int32 = 1
)

// Watcher types for checkWatches and removeWatches (RemoveWatchesRequest.Type).
const (
	WatcherChildren int32 = 1
	WatcherData     int32 = 2
	WatcherAny      int32 = 3
)
