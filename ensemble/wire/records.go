package wire

// Record is implemented by every jute record in this package, which lets a
// server or client pick the body type from an opcode (see RequestForOp and
// ResponseForOp) and handle the rest generically.
type Record interface {
	Encode(e *Encoder)
	Decode(d *Decoder) error
}

// ConnectRequest opens or resumes a session; it is the first frame a client
// sends.
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64
	Timeout         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	// HasReadOnly records whether the trailing readOnly byte is on the wire.
	// The Java client and kazoo send it, go-zookeeper does not, and servers
	// must accept both.
	HasReadOnly bool
}

func (r *ConnectRequest) Encode(e *Encoder) {
	e.Int(r.ProtocolVersion)
	e.Long(r.LastZxidSeen)
	e.Int(r.Timeout)
	e.Long(r.SessionID)
	e.Buffer(r.Passwd)
	if r.HasReadOnly {
		e.Bool(r.ReadOnly)
	}
}

func (r *ConnectRequest) Decode(d *Decoder) error {
	r.ProtocolVersion = d.Int()
	r.LastZxidSeen = d.Long()
	r.Timeout = d.Int()
	r.SessionID = d.Long()
	r.Passwd = d.Buffer()
	r.ReadOnly, r.HasReadOnly = false, false
	if d.Err() == nil && d.Remaining() > 0 {
		r.ReadOnly, r.HasReadOnly = d.Bool(), true
	}
	return d.Err()
}

// ConnectResponse answers a ConnectRequest. A zero Timeout and SessionID
// tell the client its session has expired.
type ConnectResponse struct {
	ProtocolVersion int32
	Timeout         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	// HasReadOnly records whether the trailing readOnly byte is on the wire;
	// a server should echo the client's choice, since old clients do not
	// expect it.
	HasReadOnly bool
}

func (r *ConnectResponse) Encode(e *Encoder) {
	e.Int(r.ProtocolVersion)
	e.Int(r.Timeout)
	e.Long(r.SessionID)
	e.Buffer(r.Passwd)
	if r.HasReadOnly {
		e.Bool(r.ReadOnly)
	}
}

func (r *ConnectResponse) Decode(d *Decoder) error {
	r.ProtocolVersion = d.Int()
	r.Timeout = d.Int()
	r.SessionID = d.Long()
	r.Passwd = d.Buffer()
	r.ReadOnly, r.HasReadOnly = false, false
	if d.Err() == nil && d.Remaining() > 0 {
		r.ReadOnly, r.HasReadOnly = d.Bool(), true
	}
	return d.Err()
}

// RequestHeader precedes every request after the connect handshake.
type RequestHeader struct {
	Xid    int32
	Opcode int32
}

func (r *RequestHeader) Encode(e *Encoder) {
	e.Int(r.Xid)
	e.Int(r.Opcode)
}

func (r *RequestHeader) Decode(d *Decoder) error {
	r.Xid = d.Int()
	r.Opcode = d.Int()
	return d.Err()
}

// ReplyHeader precedes every reply and notification.
type ReplyHeader struct {
	Xid  int32
	Zxid int64
	Err  Code
}

func (r *ReplyHeader) Encode(e *Encoder) {
	e.Int(r.Xid)
	e.Long(r.Zxid)
	e.Int(int32(r.Err))
}

func (r *ReplyHeader) Decode(d *Decoder) error {
	r.Xid = d.Int()
	r.Zxid = d.Long()
	r.Err = Code(d.Int())
	return d.Err()
}

// Stat is a znode's metadata as clients see it.
type Stat struct {
	Czxid          int64
	Mzxid          int64
	Ctime          int64
	Mtime          int64
	Version        int32
	Cversion       int32
	Aversion       int32
	EphemeralOwner int64
	DataLength     int32
	NumChildren    int32
	Pzxid          int64
}

func (s *Stat) Encode(e *Encoder) {
	e.Long(s.Czxid)
	e.Long(s.Mzxid)
	e.Long(s.Ctime)
	e.Long(s.Mtime)
	e.Int(s.Version)
	e.Int(s.Cversion)
	e.Int(s.Aversion)
	e.Long(s.EphemeralOwner)
	e.Int(s.DataLength)
	e.Int(s.NumChildren)
	e.Long(s.Pzxid)
}

func (s *Stat) Decode(d *Decoder) error {
	s.Czxid = d.Long()
	s.Mzxid = d.Long()
	s.Ctime = d.Long()
	s.Mtime = d.Long()
	s.Version = d.Int()
	s.Cversion = d.Int()
	s.Aversion = d.Int()
	s.EphemeralOwner = d.Long()
	s.DataLength = d.Int()
	s.NumChildren = d.Int()
	s.Pzxid = d.Long()
	return d.Err()
}

// ID names an identity within an authentication scheme, e.g.
// {"world", "anyone"} or {"digest", "user:hash"}.
type ID struct {
	Scheme string
	ID     string
}

func (r *ID) Encode(e *Encoder) {
	e.String(r.Scheme)
	e.String(r.ID)
}

func (r *ID) Decode(d *Decoder) error {
	r.Scheme = d.String()
	r.ID = d.String()
	return d.Err()
}

// ACL grants Perms to an identity.
type ACL struct {
	Perms int32
	ID    ID
}

func (r *ACL) Encode(e *Encoder) {
	e.Int(r.Perms)
	r.ID.Encode(e)
}

func (r *ACL) Decode(d *Decoder) error {
	r.Perms = d.Int()
	r.ID.Decode(d)
	return d.Err()
}

// EncodeACLs writes an ACL vector; nil is written as the null vector.
func EncodeACLs(e *Encoder, acl []ACL) {
	if acl == nil {
		e.Int(-1)
		return
	}
	e.Int(int32(len(acl)))
	for i := range acl {
		acl[i].Encode(e)
	}
}

// DecodeACLs reads an ACL vector; the null vector yields nil.
func DecodeACLs(d *Decoder) []ACL {
	n := d.count(12) // perms plus two string lengths
	if n < 0 {
		return nil
	}
	acl := make([]ACL, n)
	for i := range acl {
		acl[i].Decode(d)
	}
	if d.Err() != nil {
		return nil
	}
	return acl
}

// CreateRequest is the body of create, create2 and createContainer.
type CreateRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags int32
}

func (r *CreateRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	EncodeACLs(e, r.ACL)
	e.Int(r.Flags)
}

func (r *CreateRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.ACL = DecodeACLs(d)
	r.Flags = d.Int()
	return d.Err()
}

// CreateTTLRequest is the body of createTTL; TTL is in milliseconds.
type CreateTTLRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags int32
	TTL   int64
}

func (r *CreateTTLRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	EncodeACLs(e, r.ACL)
	e.Int(r.Flags)
	e.Long(r.TTL)
}

func (r *CreateTTLRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.ACL = DecodeACLs(d)
	r.Flags = d.Int()
	r.TTL = d.Long()
	return d.Err()
}

// CreateResponse answers create with the actual path, which differs from
// the requested one for sequential nodes.
type CreateResponse struct {
	Path string
}

func (r *CreateResponse) Encode(e *Encoder) { e.String(r.Path) }

func (r *CreateResponse) Decode(d *Decoder) error {
	r.Path = d.String()
	return d.Err()
}

// Create2Response answers create2, createContainer and createTTL.
type Create2Response struct {
	Path string
	Stat Stat
}

func (r *Create2Response) Encode(e *Encoder) {
	e.String(r.Path)
	r.Stat.Encode(e)
}

func (r *Create2Response) Decode(d *Decoder) error {
	r.Path = d.String()
	return r.Stat.Decode(d)
}

// DeleteRequest is the body of delete; Version -1 matches any version.
type DeleteRequest struct {
	Path    string
	Version int32
}

func (r *DeleteRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int(r.Version)
}

func (r *DeleteRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Version = d.Int()
	return d.Err()
}

// PathWatchRequest is the shared body of exists, getData, getChildren and
// getChildren2.
type PathWatchRequest struct {
	Path  string
	Watch bool
}

func (r *PathWatchRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Bool(r.Watch)
}

func (r *PathWatchRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Watch = d.Bool()
	return d.Err()
}

// PathRequest is the shared body of sync, getACL, getAllChildrenNumber and
// getEphemerals (where Path is a prefix).
type PathRequest struct {
	Path string
}

func (r *PathRequest) Encode(e *Encoder) { e.String(r.Path) }

func (r *PathRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	return d.Err()
}

// SetDataRequest is the body of setData; Version -1 matches any version.
type SetDataRequest struct {
	Path    string
	Data    []byte
	Version int32
}

func (r *SetDataRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	e.Int(r.Version)
}

func (r *SetDataRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.Version = d.Int()
	return d.Err()
}

// StatResponse answers exists, setData and setACL.
type StatResponse struct {
	Stat Stat
}

func (r *StatResponse) Encode(e *Encoder) { r.Stat.Encode(e) }

func (r *StatResponse) Decode(d *Decoder) error { return r.Stat.Decode(d) }

// GetDataResponse answers getData.
type GetDataResponse struct {
	Data []byte
	Stat Stat
}

func (r *GetDataResponse) Encode(e *Encoder) {
	e.Buffer(r.Data)
	r.Stat.Encode(e)
}

func (r *GetDataResponse) Decode(d *Decoder) error {
	r.Data = d.Buffer()
	return r.Stat.Decode(d)
}

// GetChildrenResponse answers getChildren with child names, not paths.
type GetChildrenResponse struct {
	Children []string
}

func (r *GetChildrenResponse) Encode(e *Encoder) { e.Strings(r.Children) }

func (r *GetChildrenResponse) Decode(d *Decoder) error {
	r.Children = d.Strings()
	return d.Err()
}

// GetChildren2Response answers getChildren2.
type GetChildren2Response struct {
	Children []string
	Stat     Stat
}

func (r *GetChildren2Response) Encode(e *Encoder) {
	e.Strings(r.Children)
	r.Stat.Encode(e)
}

func (r *GetChildren2Response) Decode(d *Decoder) error {
	r.Children = d.Strings()
	return r.Stat.Decode(d)
}

// SetACLRequest is the body of setACL; Version is matched against aversion.
type SetACLRequest struct {
	Path    string
	ACL     []ACL
	Version int32
}

func (r *SetACLRequest) Encode(e *Encoder) {
	e.String(r.Path)
	EncodeACLs(e, r.ACL)
	e.Int(r.Version)
}

func (r *SetACLRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.ACL = DecodeACLs(d)
	r.Version = d.Int()
	return d.Err()
}

// GetACLResponse answers getACL.
type GetACLResponse struct {
	ACL  []ACL
	Stat Stat
}

func (r *GetACLResponse) Encode(e *Encoder) {
	EncodeACLs(e, r.ACL)
	r.Stat.Encode(e)
}

func (r *GetACLResponse) Decode(d *Decoder) error {
	r.ACL = DecodeACLs(d)
	return r.Stat.Decode(d)
}

// CheckVersionRequest is the body of check, which only appears inside multi
// in practice.
type CheckVersionRequest struct {
	Path    string
	Version int32
}

func (r *CheckVersionRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int(r.Version)
}

func (r *CheckVersionRequest) Decode(d *Decoder) error {
	r.Path = d.String()
	r.Version = d.Int()
	return d.Err()
}

// SyncResponse answers sync.
type SyncResponse struct {
	Path string
}

func (r *SyncResponse) Encode(e *Encoder) { e.String(r.Path) }

func (r *SyncResponse) Decode(d *Decoder) error {
	r.Path = d.String()
	return d.Err()
}

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
