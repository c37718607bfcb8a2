// Package wire implements ZooKeeper's client wire protocol: the jute
// encoding of the request and reply records, TCP framing, opcodes and error
// codes.
//
// Every record is encoded and decoded by hand rather than through
// reflection, so the cost of a request is a handful of bounds checks and the
// decoders can treat every length on the wire as untrusted.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decoding failure, so a server can answer
// with ErrMarshallingError (or drop the connection) without inspecting the
// details.
var ErrMalformed = errors.New("wire: malformed record")

// Encoder appends jute-encoded values to a byte slice. Encoding cannot fail:
// the slice grows as needed, up to the limit set with Limit.
type Encoder struct {
	buf    []byte
	framed bool
	limit  int  // 0: none; see Limit
	over   bool // a write passed limit; later variable-size writes are dropped
}

// Limit bounds what the encoder holds to about n bytes: once its contents
// pass n, Over reports true and strings, buffers and string vectors are
// no longer appended, so a reply that would be huge costs at most n plus
// one value before its builder notices and answers an error instead.
// The result is no valid record then; n <= 0 means no limit.
func (e *Encoder) Limit(n int) { e.limit = n }

// Over reports whether the contents passed the limit.
func (e *Encoder) Over() bool { return e.over }

// full records and reports whether the contents passed the limit.
func (e *Encoder) full() bool {
	if !e.over && e.limit > 0 && len(e.buf) > e.limit {
		e.over = true
	}
	return e.over
}

// NewEncoder returns an encoder that writes a bare record body into buf's
// storage (buf's contents are discarded).
func NewEncoder(buf []byte) *Encoder {
	return &Encoder{buf: buf[:0]}
}

// NewFrameEncoder returns an encoder that reserves the 4-byte length prefix
// up front, so a reply header and body can be built in one buffer and sent
// with Frame without a copy.
func NewFrameEncoder(buf []byte) *Encoder {
	return &Encoder{buf: append(buf[:0], 0, 0, 0, 0), framed: true}
}

// Reset discards everything written so far but keeps the storage, which lets
// a connection reuse one encoder for all its replies.
func (e *Encoder) Reset() {
	e.buf = e.buf[:0]
	e.over = false
	if e.framed {
		e.buf = append(e.buf, 0, 0, 0, 0)
	}
}

// grow makes room for n more bytes. It doubles the storage instead of
// leaving that to append, which grows a large slice by a quarter at a
// time and so copies a large reply about five times over; and it does
// not grow the storage far past the limit, if there is one.
func (e *Encoder) grow(n int) {
	if cap(e.buf)-len(e.buf) >= n {
		return
	}
	c := max(2*cap(e.buf), len(e.buf)+n, 64)
	if e.limit > 0 {
		c = min(c, max(e.limit+64, len(e.buf)+n))
	}
	b := make([]byte, len(e.buf), c)
	copy(b, e.buf)
	e.buf = b
}

// Int writes a jute int.
func (e *Encoder) Int(v int32) {
	e.grow(4)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v))
}

// Long writes a jute long.
func (e *Encoder) Long(v int64) {
	e.grow(8)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
}

// Bool writes a jute boolean as a single 0 or 1 byte.
func (e *Encoder) Bool(v bool) {
	var b byte
	if v {
		b = 1
	}
	e.buf = append(e.buf, b)
}

// Buffer writes a jute buffer. A nil slice is written as length -1 (null),
// which ZooKeeper distinguishes from an empty buffer.
func (e *Encoder) Buffer(b []byte) {
	if b == nil {
		e.Int(-1)
		return
	}
	e.Int(int32(len(b)))
	if e.full() {
		return
	}
	e.grow(len(b))
	e.buf = append(e.buf, b...)
}

// String writes a jute ustring. Go strings cannot be null, so the empty
// string is written as length 0.
func (e *Encoder) String(s string) {
	e.Int(int32(len(s)))
	if e.full() {
		return
	}
	e.grow(len(s))
	e.buf = append(e.buf, s...)
}

// Strings writes a vector of ustrings; a nil slice is written as the null
// vector (-1).
func (e *Encoder) Strings(s []string) {
	if s == nil {
		e.Int(-1)
		return
	}
	e.Int(int32(len(s)))
	for _, v := range s {
		if e.full() {
			return
		}
		e.String(v)
	}
}

// Bytes returns the record body, excluding the length prefix of a frame
// encoder. The result aliases the encoder's storage.
func (e *Encoder) Bytes() []byte {
	if e.framed {
		return e.buf[4:]
	}
	return e.buf
}

// Frame patches the length prefix and returns the complete frame. It panics
// on an encoder from NewEncoder, which has no room reserved for the prefix.
func (e *Encoder) Frame() []byte {
	if !e.framed {
		panic("wire: Frame called on an encoder without a reserved length prefix")
	}
	binary.BigEndian.PutUint32(e.buf, uint32(len(e.buf)-4))
	return e.buf
}

// Decoder reads jute values from a byte slice. Its error is sticky: after the
// first failure every read returns a zero value and Err reports the failure,
// so a record decoder can read all fields and check once at the end.
//
// Lengths and counts come from the peer and are checked against the bytes
// actually present before anything is allocated. Returned strings and
// buffers are copies, because callers reuse frame buffers.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder returns a decoder reading from b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Reset makes the decoder read from b and clears any error.
func (d *Decoder) Reset(b []byte) { *d = Decoder{b: b} }

// Err returns the first error encountered, or nil.
func (d *Decoder) Err() error { return d.err }

// Remaining returns the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

func (d *Decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > d.Remaining() {
		d.fail("need %d bytes at offset %d, have %d", n, d.off, d.Remaining())
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// Int reads a jute int.
func (d *Decoder) Int() int32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(p))
}

// Long reads a jute long.
func (d *Decoder) Long() int64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p))
}

// Bool reads a jute boolean; like Java's DataInput, any non-zero byte is true.
func (d *Decoder) Bool() bool {
	p := d.take(1)
	return p != nil && p[0] != 0
}

// count reads a vector or buffer length and checks that the remaining input
// could hold that many elements of at least minSize bytes each. It returns -1
// for null and -2 on error.
func (d *Decoder) count(minSize int) int {
	n := d.Int()
	switch {
	case d.err != nil:
		return -2
	case n == -1:
		return -1
	case n < 0:
		d.fail("negative length %d", n)
		return -2
	case int64(n)*int64(minSize) > int64(d.Remaining()):
		d.fail("length %d exceeds the %d bytes remaining", n, d.Remaining())
		return -2
	}
	return int(n)
}

// Buffer reads a jute buffer as a fresh copy. Null (-1) yields nil and an
// empty buffer yields a non-nil empty slice, so the two survive a round trip.
func (d *Decoder) Buffer() []byte {
	n := d.count(1)
	if n < 0 {
		return nil
	}
	b := make([]byte, n)
	copy(b, d.take(n))
	return b
}

// String reads a jute ustring; null is returned as "".
func (d *Decoder) String() string {
	n := d.count(1)
	if n < 0 {
		return ""
	}
	return string(d.take(n))
}

// Strings reads a vector of ustrings. The null vector yields nil.
func (d *Decoder) Strings() []string {
	n := d.count(4)
	if n < 0 {
		return nil
	}
	s := make([]string, n)
	for i := range s {
		s[i] = d.String()
	}
	if d.err != nil {
		return nil
	}
	return s
}
