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
