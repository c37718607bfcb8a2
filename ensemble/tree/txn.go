package tree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// txnVersion leads every encoded Txn so that the format can evolve while old
// raft log entries stay readable.
const txnVersion byte = 1

const (
	flagMulti byte = 1
	// flagX509 marks a TxnOps whose outcome depends on the x509 scheme
	// (see dependsOnX509). Members that predate the scheme never set it,
	// so an entry of theirs that names x509 is known to have been applied
	// with the scheme unknown, and is replayed that way. A member that
	// predates it refuses the flag, like any unknown one.
	flagX509 byte = 4
	// flagEnforceQuota carries Txn.EnforceQuota. It is set only while
	// enforcement is on, so members that predate it read every other
	// entry.
	flagEnforceQuota byte = 8
)

// errCorruptTxn is wrapped by every UnmarshalBinary failure.
var errCorruptTxn = errors.New("tree: corrupt transaction encoding")

// MarshalBinary encodes the transaction for a raft log entry. The format is
// a version byte, the kind, and then only the fields that kind uses (e.g. a
// TxnCreateSession carries no ops), as varints and length-prefixed strings.
// Nil and empty slices are distinguished so that decoding reproduces the
// Txn exactly; ZooKeeper itself tells null data from empty data.
func (t *Txn) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, t.sizeHint())
	b = append(b, txnVersion, byte(t.Kind))
	switch t.Kind {
	case TxnOps:
		b = binary.AppendVarint(b, t.Session)
		b = binary.AppendVarint(b, t.Time)
		var flags byte
		if t.Multi {
			flags |= flagMulti
		}
		if t.dependsOnX509() && !t.preX509 {
			flags |= flagX509
		}
		if t.EnforceQuota {
			flags |= flagEnforceQuota
		}
		b = append(b, flags)
		b = appendLen(b, len(t.Auth), t.Auth == nil)
		for _, id := range t.Auth {
			b = appendString(b, id.Scheme)
			b = appendString(b, id.ID)
		}
		b = appendLen(b, len(t.Ops), t.Ops == nil)
		for i := range t.Ops {
			op := &t.Ops[i]
			b = append(b, byte(op.Kind))
			b = appendString(b, op.Path)
			switch op.Kind {
			case OpCreate:
				b = appendBytes(b, op.Data)
				b = appendACLs(b, op.ACL)
				b = binary.AppendVarint(b, int64(op.Mode))
			case OpDelete, OpCheck:
				b = binary.AppendVarint(b, int64(op.Version))
			case OpSetData:
				b = appendBytes(b, op.Data)
				b = binary.AppendVarint(b, int64(op.Version))
			case OpSetACL:
				b = appendACLs(b, op.ACL)
				b = binary.AppendVarint(b, int64(op.Version))
			case OpFail:
				b = append(b, byte(op.Fail))
			default:
				return nil, fmt.Errorf("tree: cannot encode op kind %d", op.Kind)
			}
		}
	case TxnCreateSession:
		b = binary.AppendVarint(b, t.Time)
		b = binary.AppendVarint(b, int64(t.Timeout))
		b = appendBytes(b, t.Password)
	case TxnCloseSession:
		b = binary.AppendVarint(b, t.Session)
		b = binary.AppendVarint(b, t.Time)
	default:
		return nil, fmt.Errorf("tree: cannot encode transaction kind %d", t.Kind)
	}
	return b, nil
}

func (t *Txn) sizeHint() int {
	n := 32 + len(t.Password)
	for _, id := range t.Auth {
		n += 4 + len(id.Scheme) + len(id.ID)
	}
	for i := range t.Ops {
		op := &t.Ops[i]
		n += 16 + len(op.Path) + len(op.Data)
		for _, a := range op.ACL {
			n += 8 + len(a.Scheme) + len(a.ID)
		}
	}
	return n
}

// appendLen writes a slice length as length+1, reserving 0 for nil.
func appendLen(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = appendLen(b, len(p), p == nil)
	return append(b, p...)
}

func appendACLs(b []byte, acl []ACL) []byte {
	b = appendLen(b, len(acl), acl == nil)
	for _, a := range acl {
		b = binary.AppendVarint(b, int64(a.Perms))
		b = appendString(b, a.Scheme)
		b = appendString(b, a.ID)
	}
	return b
}

// UnmarshalBinary decodes what MarshalBinary produced. It rejects unknown
// versions and kinds, truncation, trailing bytes and out-of-range values
// with an error, never allocates more than the input can describe, and
// copies everything it keeps, so b may be reused afterwards.
func (t *Txn) UnmarshalBinary(b []byte) error {
	d := txnDecoder{b: b}
	if v := d.byte(); d.err == nil && v != txnVersion {
		return fmt.Errorf("%w: unknown version %d", errCorruptTxn, v)
	}
	var out Txn
	var flags byte
	out.Kind = TxnKind(d.byte())
	switch out.Kind {
	case TxnOps:
		out.Session = d.varint()
		out.Time = d.varint()
		flags = d.byte()
		if flags&^(flagMulti|flagX509|flagEnforceQuota) != 0 {
			d.fail("unknown flags")
		}
		out.Multi = flags&flagMulti != 0
		out.EnforceQuota = flags&flagEnforceQuota != 0
		if n, isNil := d.count(2); !isNil {
			out.Auth = make([]Identity, n)
			for i := range out.Auth {
				out.Auth[i] = Identity{Scheme: d.string(), ID: d.string()}
			}
		}
		if n, isNil := d.count(2); !isNil {
			out.Ops = make([]Op, n)
			for i := range out.Ops {
				d.op(&out.Ops[i])
			}
		}
	case TxnCreateSession:
		out.Time = d.varint()
		out.Timeout = d.int32()
		out.Password = d.bytes()
	case TxnCloseSession:
		out.Session = d.varint()
		out.Time = d.varint()
	default:
		d.fail("unknown transaction kind")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return d.err
	}
	if flags&flagX509 == 0 && out.dependsOnX509() {
		out.preX509 = true
	}
	*t = out
	return nil
}

// dependsOnX509 reports whether applying the txn gives a different outcome
// with the x509 scheme registered than without: an op's ACL names x509,
// or expands "auth" for a requester holding x509 identities. x509
// identities alone change nothing, since without the scheme no node can
// carry an x509 ACL for them to match.
func (t *Txn) dependsOnX509() bool {
	hasID := false
	for _, id := range t.Auth {
		if id.Scheme == schemeX509 {
			hasID = true
			break
		}
	}
	for i := range t.Ops {
		for _, a := range t.Ops[i].ACL {
			if a.Scheme == schemeX509 || (hasID && a.Scheme == schemeAuth) {
				return true
			}
		}
	}
	return false
}

type txnDecoder struct {
	b   []byte
	err error
}

func (d *txnDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errCorruptTxn, what)
	}
	d.b = nil
}

func (d *txnDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *txnDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *txnDecoder) int32() int32 {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int32 out of range")
		return 0
	}
	return int32(v)
}

func (d *txnDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a nil-or-length prefix for a list whose elements take at
// least minSize bytes each, so a forged count cannot force a huge
// allocation.
func (d *txnDecoder) count(minSize int) (n int, isNil bool) {
	v := d.uvarint()
	if d.err != nil {
		return 0, true
	}
	if v == 0 {
		return 0, true
	}
	v--
	if v > uint64(len(d.b)/minSize) {
		d.fail("length exceeds input")
		return 0, true
	}
	return int(v), false
}

func (d *txnDecoder) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail("length exceeds input")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *txnDecoder) string() string {
	return string(d.raw(d.uvarint()))
}

func (d *txnDecoder) bytes() []byte {
	n, isNil := d.count(1)
	if isNil {
		return nil
	}
	return append(make([]byte, 0, n), d.raw(uint64(n))...)
}

func (d *txnDecoder) acls() []ACL {
	n, isNil := d.count(3)
	if isNil {
		return nil
	}
	acl := make([]ACL, n)
	for i := range acl {
		acl[i] = ACL{Perms: d.int32(), Scheme: d.string(), ID: d.string()}
	}
	return acl
}

func (d *txnDecoder) op(op *Op) {
	op.Kind = OpKind(d.byte())
	op.Path = d.string()
	switch op.Kind {
	case OpCreate:
		op.Data = d.bytes()
		op.ACL = d.acls()
		op.Mode = Mode(d.int32())
	case OpDelete, OpCheck:
		op.Version = d.int32()
	case OpSetData:
		op.Data = d.bytes()
		op.Version = d.int32()
	case OpSetACL:
		op.ACL = d.acls()
		op.Version = d.int32()
	case OpFail:
		op.Fail = Failure(d.byte())
		if op.Fail < FailBadArguments || op.Fail > FailUnreadable {
			d.fail("unknown failure")
		}
	default:
		d.fail("unknown op kind")
	}
}
