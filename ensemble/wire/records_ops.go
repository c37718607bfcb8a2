package wire

// The bodies of the requests that read and write znodes, and of their
// replies.

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
