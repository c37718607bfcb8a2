package wire

// A multi body is a sequence of MultiHeader{type, done, err} records, each
// followed by the body its type selects, ended by a header with done set.
// There is no count up front, so the number of operations is bounded only by
// the frame size: every operation consumes at least one 9-byte header.

func encodeMultiHeader(e *Encoder, typ int32, done bool, err int32) {
	e.Int(typ)
	e.Bool(done)
	e.Int(err)
}

// decodeMultiHeader reports whether an operation follows, i.e. the header
// read cleanly and is not the terminator.
func decodeMultiHeader(d *Decoder) (typ, err int32, more bool) {
	typ = d.Int()
	done := d.Bool()
	err = d.Int()
	return typ, err, d.Err() == nil && !done
}

// MultiOp is one operation of a multi or multiRead request. Which fields are
// on the wire depends on Type:
//
//	OpCreate, OpCreate2, OpCreateContainer  Path, Data, ACL, Flags
//	OpCreateTTL                             Path, Data, ACL, Flags, TTL
//	OpDelete, OpCheck                       Path, Version
//	OpSetData                               Path, Data, Version
//	OpGetData, OpGetChildren                Path
//
// The read operations travel as GetDataRequest/GetChildrenRequest, whose
// watch flag is always false inside a multiRead and is therefore not kept.
type MultiOp struct {
	Type    int32
	Path    string
	Data    []byte
	ACL     []ACL
	Flags   int32
	Version int32
	TTL     int64
}

// MultiRequest is the body of multi and multiRead.
type MultiRequest struct {
	Ops []MultiOp
}

// Encode writes the operations. An operation whose Type is not listed on
// MultiOp gets a header without a body, which Decode rejects.
func (r *MultiRequest) Encode(e *Encoder) {
	for i := range r.Ops {
		op := &r.Ops[i]
		encodeMultiHeader(e, op.Type, false, -1)
		switch op.Type {
		case OpCreate, OpCreate2, OpCreateContainer, OpCreateTTL:
			e.String(op.Path)
			e.Buffer(op.Data)
			EncodeACLs(e, op.ACL)
			e.Int(op.Flags)
			if op.Type == OpCreateTTL {
				e.Long(op.TTL)
			}
		case OpDelete, OpCheck:
			e.String(op.Path)
			e.Int(op.Version)
		case OpSetData:
			e.String(op.Path)
			e.Buffer(op.Data)
			e.Int(op.Version)
		case OpGetData, OpGetChildren:
			e.String(op.Path)
			e.Bool(false)
		}
	}
	encodeMultiHeader(e, -1, true, -1)
}

// Decode reads operations up to the terminating header. An operation type
// that cannot appear in a multi is an error, since its body length is
// unknown and the rest of the frame cannot be parsed.
func (r *MultiRequest) Decode(d *Decoder) error {
	r.Ops = nil
	for {
		typ, _, more := decodeMultiHeader(d)
		if !more {
			break
		}
		op := MultiOp{Type: typ}
		switch typ {
		case OpCreate, OpCreate2, OpCreateContainer, OpCreateTTL:
			op.Path = d.String()
			op.Data = d.Buffer()
			op.ACL = DecodeACLs(d)
			op.Flags = d.Int()
			if typ == OpCreateTTL {
				op.TTL = d.Long()
			}
		case OpDelete, OpCheck:
			op.Path = d.String()
			op.Version = d.Int()
		case OpSetData:
			op.Path = d.String()
			op.Data = d.Buffer()
			op.Version = d.Int()
		case OpGetData, OpGetChildren:
			op.Path = d.String()
			d.Bool()
		default:
			d.fail("unknown multi op type %d", typ)
		}
		r.Ops = append(r.Ops, op)
	}
	if d.Err() != nil {
		r.Ops = nil
	}
	return d.Err()
}

// MultiResult is the outcome of one operation of a multi. Which fields are
// on the wire depends on Type:
//
//	OpCreate                                   Path
//	OpCreate2, OpCreateContainer, OpCreateTTL  Path, Stat
//	OpDelete, OpCheck                          (none)
//	OpSetData                                  Stat
//	OpGetData                                  Data, Stat
//	OpGetChildren                              Children
//	OpError                                    Err
//
// Err is also carried in every result's header, where ZooKeeper sends 0 for
// successful operations.
type MultiResult struct {
	Type     int32
	Err      Code
	Path     string
	Stat     Stat
	Data     []byte
	Children []string
}

// MultiResponse is the reply body of multi and multiRead. When a multi
// fails, every operation is reported as an OpError result: the failing one
// with its code, those before it with OK and those after it with
// ErrRuntimeInconsistency.
type MultiResponse struct {
	Results []MultiResult
}

// Encode writes the results. A result whose Type is not listed on
// MultiResult gets a header without a body, which Decode rejects.
func (r *MultiResponse) Encode(e *Encoder) {
	for i := range r.Results {
		if e.full() {
			return
		}
		r.Results[i].Encode(e)
	}
	EncodeMultiEnd(e)
}

// Encode writes one result of a multi reply, so that a reply can be
// streamed op by op; EncodeMultiEnd ends it.
func (res *MultiResult) Encode(e *Encoder) {
	encodeMultiHeader(e, res.Type, false, int32(res.Err))
	switch res.Type {
	case OpCreate:
		e.String(res.Path)
	case OpCreate2, OpCreateContainer, OpCreateTTL:
		e.String(res.Path)
		res.Stat.Encode(e)
	case OpSetData:
		res.Stat.Encode(e)
	case OpGetData:
		e.Buffer(res.Data)
		res.Stat.Encode(e)
	case OpGetChildren:
		e.Strings(res.Children)
	case OpError:
		e.Int(int32(res.Err))
	}
}

// EncodeMultiEnd writes the header that ends the results of a multi reply.
func EncodeMultiEnd(e *Encoder) { encodeMultiHeader(e, -1, true, -1) }

// Decode reads results up to the terminating header. For OpError results
// the code in the body wins over the header, as in ZooKeeper's client.
func (r *MultiResponse) Decode(d *Decoder) error {
	r.Results = nil
	for {
		typ, err, more := decodeMultiHeader(d)
		if !more {
			break
		}
		res := MultiResult{Type: typ, Err: Code(err)}
		switch typ {
		case OpCreate:
			res.Path = d.String()
		case OpCreate2, OpCreateContainer, OpCreateTTL:
			res.Path = d.String()
			res.Stat.Decode(d)
		case OpDelete, OpCheck:
		case OpSetData:
			res.Stat.Decode(d)
		case OpGetData:
			res.Data = d.Buffer()
			res.Stat.Decode(d)
		case OpGetChildren:
			res.Children = d.Strings()
		case OpError:
			res.Err = Code(d.Int())
		default:
			d.fail("unknown multi result type %d", typ)
		}
		r.Results = append(r.Results, res)
	}
	if d.Err() != nil {
		r.Results = nil
	}
	return d.Err()
}
