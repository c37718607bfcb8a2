package wire

// The bodies of auth, of watch events and watch requests, and of the
// requests ZooKeeper 3.6 added (ephemerals, children counts, who am I).

// AuthPacket is the body of auth (addAuthInfo). Type is unused by servers
// and sent as 0.
type AuthPacket struct {
	Type   int32
	Scheme string
	Auth   []byte
}

func (r *AuthPacket) Encode(e *Encoder) {
	e.Int(r.Type)
	e.String(r.Scheme)
	e.Buffer(r.Auth)
}

func (r *AuthPacket) Decode(d *Decoder) error {
	r.Type = d.Int()
	r.Scheme = d.String()
	r.Auth = d.Buffer()
	return d.Err()
}

// WatcherEvent is the body of a notification (xid XidNotification).
type WatcherEvent struct {
	Type  int32
	State int32
	Path  string
}

func (r *WatcherEvent) Encode(e *Encoder) {
	e.Int(r.Type)
	e.Int(r.State)
	e.String(r.Path)
}

func (r *WatcherEvent) Decode(d *Decoder) error {
	r.Type = d.Int()
	r.State = d.Int()
	r.Path = d.String()
	return d.Err()
}

// SetWatches re-registers a client's watches after it reconnects, so events
// since RelativeZxid can be delivered.
type SetWatches struct {
	RelativeZxid int64
	DataWatches  []string
	ExistWatches []string
	ChildWatches []string
}

func (r *SetWatches) Encode(e *Encoder) {
	e.Long(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
}

func (r *SetWatches) Decode(d *Decoder) error {
	r.RelativeZxid = d.Long()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	return d.Err()
}

// SetWatches2 extends SetWatches with persistent watches (ZooKeeper 3.6+).
type SetWatches2 struct {
	RelativeZxid               int64
	DataWatches                []string
	ExistWatches               []string
	ChildWatches               []string
	PersistentWatches          []string
	PersistentRecursiveWatches []string
}

func (r *SetWatches2) Encode(e *Encoder) {
	e.Long(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
	e.Strings(r.PersistentWatches)
	e.Strings(r.PersistentRecursiveWatches)
}

func (r *SetWatches2) Decode(d *Decoder) error {
	r.RelativeZxid = d.Long()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	r.PersistentWatches = d.Strings()
	r.PersistentRecursiveWatches = d.Strings()
	return d.Err()
}

// AddWatchRequest is the body of addWatch; Mode is AddWatchPersistent or
// AddWatchPersistentRecursive.
type AddWatchRequest struct {
	Path string
	Mode int32
}

func (r *AddWatchRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int(r.Mode)
}

func (r *AddWatchRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Mode = d.Int()
	return d.Err()
}

// RemoveWatchesRequest is the shared body of checkWatches and removeWatches;
// Type is one of the Watcher constants.
type RemoveWatchesRequest struct {
	Path string
	Type int32
}

func (r *RemoveWatchesRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int(r.Type)
}

func (r *RemoveWatchesRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Type = d.Int()
	return d.Err()
}

// GetEphemeralsResponse answers getEphemerals with full paths.
type GetEphemeralsResponse struct {
	Ephemerals []string
}

func (r *GetEphemeralsResponse) Encode(e *Encoder) { e.Strings(r.Ephemerals) }

func (r *GetEphemeralsResponse) Decode(d *Decoder) error {
	r.Ephemerals = d.Strings()
	return d.Err()
}

// GetAllChildrenNumberResponse answers getAllChildrenNumber.
type GetAllChildrenNumberResponse struct {
	TotalNumber int32
}

func (r *GetAllChildrenNumberResponse) Encode(e *Encoder) { e.Int(r.TotalNumber) }

func (r *GetAllChildrenNumberResponse) Decode(d *Decoder) error {
	r.TotalNumber = d.Int()
	return d.Err()
}

// ClientInfo is one identity a session is authenticated as.
type ClientInfo struct {
	AuthScheme string
	User       string
}

func (r *ClientInfo) Encode(e *Encoder) {
	e.String(r.AuthScheme)
	e.String(r.User)
}

func (r *ClientInfo) Decode(d *Decoder) error {
	r.AuthScheme = d.String()
	r.User = d.String()
	return d.Err()
}

// WhoAmIResponse answers whoAmI.
type WhoAmIResponse struct {
	ClientInfo []ClientInfo
}

func (r *WhoAmIResponse) Encode(e *Encoder) {
	if r.ClientInfo == nil {
		e.Int(-1)
		return
	}
	e.Int(int32(len(r.ClientInfo)))
	for i := range r.ClientInfo {
		r.ClientInfo[i].Encode(e)
	}
}

func (r *WhoAmIResponse) Decode(d *Decoder) error {
	r.ClientInfo = nil
	n := d.count(8) // two string lengths
	if n < 0 {
		return d.Err()
	}
	info := make([]ClientInfo, n)
	for i := range info {
		info[i].Decode(d)
	}
	if d.Err() == nil {
		r.ClientInfo = info
	}
	return d.Err()
}

// ErrorResponse is the body of a failed operation inside a multi reply.
type ErrorResponse struct {
	Err int32
}

func (r *ErrorResponse) Encode(e *Encoder) { e.Int(r.Err) }

func (r *ErrorResponse) Decode(d *Decoder) error {
	r.Err = d.Int()
	return d.Err()
}

// RequestForOp returns an empty record for the body of a request with the
// given opcode. Opcodes whose requests have no body (ping, closeSession,
// whoAmI) return (nil, true); opcodes this package cannot decode, including
// sasl and reconfig, return (nil, false).
func RequestForOp(op int32) (Record, bool) {
	switch op {
	case OpCreate, OpCreate2, OpCreateContainer:
		return new(CreateRequest), true
	case OpCreateTTL:
		return new(CreateTTLRequest), true
	case OpDelete:
		return new(DeleteRequest), true
	case OpExists, OpGetData, OpGetChildren, OpGetChildren2:
		return new(PathWatchRequest), true
	case OpSetData:
		return new(SetDataRequest), true
	case OpGetACL, OpSync, OpGetAllChildrenNumber, OpGetEphemerals:
		return new(PathRequest), true
	case OpSetACL:
		return new(SetACLRequest), true
	case OpCheck:
		return new(CheckVersionRequest), true
	case OpMulti, OpMultiRead:
		return new(MultiRequest), true
	case OpCheckWatches, OpRemoveWatches:
		return new(RemoveWatchesRequest), true
	case OpAuth:
		return new(AuthPacket), true
	case OpSetWatches:
		return new(SetWatches), true
	case OpSetWatches2:
		return new(SetWatches2), true
	case OpAddWatch:
		return new(AddWatchRequest), true
	case OpPing, OpCloseSession, OpWhoAmI:
		return nil, true
	}
	return nil, false
}

// ResponseForOp returns an empty record for the body of a successful reply
// to the given opcode. Replies without a body (delete, setWatches, ping, ...)
// return (nil, true); opcodes this package does not know return (nil, false).
// A reply whose header carries an error code has no body; multi reports
// failures per operation inside its body instead.
func ResponseForOp(op int32) (Record, bool) {
	switch op {
	case OpCreate:
		return new(CreateResponse), true
	case OpCreate2, OpCreateContainer, OpCreateTTL:
		return new(Create2Response), true
	case OpExists, OpSetData, OpSetACL:
		return new(StatResponse), true
	case OpGetData:
		return new(GetDataResponse), true
	case OpGetACL:
		return new(GetACLResponse), true
	case OpGetChildren:
		return new(GetChildrenResponse), true
	case OpGetChildren2:
		return new(GetChildren2Response), true
	case OpSync:
		return new(SyncResponse), true
	case OpMulti, OpMultiRead:
		return new(MultiResponse), true
	case OpGetEphemerals:
		return new(GetEphemeralsResponse), true
	case OpGetAllChildrenNumber:
		return new(GetAllChildrenNumberResponse), true
	case OpWhoAmI:
		return new(WhoAmIResponse), true
	case OpDelete, OpCheck, OpPing, OpCloseSession, OpAuth, OpSetWatches,
		OpSetWatches2, OpAddWatch, OpCheckWatches, OpRemoveWatches:
		return nil, true
	}
	return nil, false
}
