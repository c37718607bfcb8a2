package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// allocBytes reports how many bytes f allocates on the heap.
func allocBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func TestDecoderStickyError(t *testing.T) {
	d := NewDecoder([]byte{0, 0, 0, 1, 0xff})
	if d.Int() != 1 {
		t.Fatal("first int")
	}
	if d.Long() != 0 || d.Err() == nil {
		t.Fatal("short long must fail")
	}
	first := d.Err()
	// The one remaining byte must not be consumed by later reads.
	if d.Bool() || d.Int() != 0 || d.String() != "" || d.Buffer() != nil || d.Strings() != nil {
		t.Fatal("reads after failure must return zero values")
	}
	if d.Err() != first || d.Remaining() != 1 {
		t.Fatalf("error changed or input consumed: %v, %d left", d.Err(), d.Remaining())
	}
	d.Reset([]byte{1})
	if d.Err() != nil || !d.Bool() {
		t.Fatal("Reset must clear the error")
	}
}

func TestDecoderHostileLengths(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		read func(d *Decoder)
	}{
		{"buffer huge", append(be32(0x7fffffff), 1, 2, 3, 4), func(d *Decoder) { d.Buffer() }},
		{"buffer just over", append(be32(5), 1, 2, 3, 4), func(d *Decoder) { d.Buffer() }},
		{"buffer -2", be32(-2), func(d *Decoder) { d.Buffer() }},
		{"buffer min int", be32(-1 << 31), func(d *Decoder) { d.Buffer() }},
		{"string huge", append(be32(0x7fffffff), 'a'), func(d *Decoder) { _ = d.String() }},
		{"string -5", be32(-5), func(d *Decoder) { _ = d.String() }},
		{"strings huge", append(be32(0x7fffffff), make([]byte, 64)...), func(d *Decoder) { d.Strings() }},
		// 17 elements need at least 68 bytes; only 64 follow.
		{"strings over by count", append(be32(17), make([]byte, 64)...), func(d *Decoder) { d.Strings() }},
		{"strings -3", be32(-3), func(d *Decoder) { d.Strings() }},
		{"acls huge", append(be32(0x10000000), make([]byte, 64)...), func(d *Decoder) { DecodeACLs(d) }},
		{"acls -2", be32(-2), func(d *Decoder) { DecodeACLs(d) }},
		{"whoami huge", append(be32(0x7fffffff), make([]byte, 8)...), func(d *Decoder) { (&WhoAmIResponse{}).Decode(d) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d *Decoder
			n := allocBytes(func() {
				d = NewDecoder(c.in)
				c.read(d)
			})
			if !errors.Is(d.Err(), ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", d.Err())
			}
			if n > 64<<10 {
				t.Fatalf("allocated %d bytes for a %d-byte input", n, len(c.in))
			}
		})
	}
}

func TestDecoderNullVersusEmpty(t *testing.T) {
	e := NewEncoder(nil)
	e.Buffer(nil)
	e.Buffer([]byte{})
	e.Strings(nil)
	e.Strings([]string{})
	e.Int(-1) // a null ustring
	d := NewDecoder(e.Bytes())
	if b := d.Buffer(); b != nil {
		t.Fatalf("null buffer: %#v", b)
	}
	if b := d.Buffer(); b == nil || len(b) != 0 {
		t.Fatalf("empty buffer: %#v", b)
	}
	if s := d.Strings(); s != nil {
		t.Fatalf("null vector: %#v", s)
	}
	if s := d.Strings(); s == nil || len(s) != 0 {
		t.Fatalf("empty vector: %#v", s)
	}
	if s := d.String(); s != "" || d.Err() != nil {
		t.Fatalf("null string: %q %v", s, d.Err())
	}
}

func TestDecoderDoesNotAlias(t *testing.T) {
	e := NewEncoder(nil)
	e.String("path")
	e.Buffer([]byte("data"))
	e.Strings([]string{"child"})
	in := e.Bytes()
	d := NewDecoder(in)
	s, b, v := d.String(), d.Buffer(), d.Strings()
	for i := range in {
		in[i] = 'X'
	}
	if s != "path" || string(b) != "data" || v[0] != "child" {
		t.Fatalf("results alias the input: %q %q %q", s, b, v)
	}
	if cap(b) != len(b) {
		// Appending to a returned buffer must not scribble on anything else.
		t.Fatalf("buffer capacity %d, len %d", cap(b), len(b))
	}
}

func TestEncoderFrame(t *testing.T) {
	storage := make([]byte, 0, 256)
	e := NewFrameEncoder(storage)
	hdr := ReplyHeader{Xid: 3, Zxid: 10}
	hdr.Encode(e)
	body := GetDataResponse{Data: []byte("abc"), Stat: testStat}
	body.Encode(e)
	frame := e.Frame()
	if &frame[0] != &storage[:1][0] {
		t.Fatal("frame was not built in the supplied buffer")
	}
	if int(binary.BigEndian.Uint32(frame)) != len(frame)-4 || !bytes.Equal(e.Bytes(), frame[4:]) {
		t.Fatalf("bad prefix in %x", frame)
	}

	got, err := ReadFrame(bytes.NewReader(frame), nil, DefaultMaxData)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(got)
	var h2 ReplyHeader
	var b2 GetDataResponse
	h2.Decode(d)
	if err := b2.Decode(d); err != nil || h2 != hdr || string(b2.Data) != "abc" || b2.Stat != testStat {
		t.Fatalf("decoded %+v %+v %v", h2, b2, err)
	}

	e.Reset()
	e.Int(7)
	if f := e.Frame(); !bytes.Equal(f, []byte{0, 0, 0, 4, 0, 0, 0, 7}) {
		t.Fatalf("after Reset: %x", f)
	}
	if !bytes.Equal(AppendFrame(nil, e.Bytes()), e.Frame()) {
		t.Fatal("AppendFrame disagrees with the frame encoder")
	}
}

func TestPlainEncoder(t *testing.T) {
	e := NewEncoder(make([]byte, 10))
	e.Bool(true)
	e.Long(-2)
	want := []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}
	if !bytes.Equal(e.Bytes(), want) {
		t.Fatalf("got %x", e.Bytes())
	}
	e.Reset()
	if len(e.Bytes()) != 0 {
		t.Fatal("Reset")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Frame on a plain encoder must panic")
		}
	}()
	e.Frame()
}

// countingReader records how much was read, to prove that an oversized
// frame's body is left alone.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestReadFrame(t *testing.T) {
	t.Run("reuses buffer", func(t *testing.T) {
		buf := make([]byte, 0, 64)
		got, err := ReadFrame(bytes.NewReader(AppendFrame(nil, []byte("hello"))), buf, 100)
		if err != nil || string(got) != "hello" || &got[0] != &buf[:1][0] {
			t.Fatalf("%q %v", got, err)
		}
	})
	t.Run("grows buffer", func(t *testing.T) {
		got, err := ReadFrame(bytes.NewReader(AppendFrame(nil, []byte("hello"))), make([]byte, 2), 100)
		if err != nil || string(got) != "hello" {
			t.Fatalf("%q %v", got, err)
		}
	})
	t.Run("empty frame", func(t *testing.T) {
		got, err := ReadFrame(bytes.NewReader(be32(0)), nil, 100)
		if err != nil || len(got) != 0 {
			t.Fatalf("%q %v", got, err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		for _, n := range []int32{101, -1, -1 << 31, 0x7fffffff} {
			cr := &countingReader{r: bytes.NewReader(append(be32(n), make([]byte, 200)...))}
			var err error
			alloc := allocBytes(func() { _, err = ReadFrame(cr, make([]byte, 0, 8), 100) })
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("%d: got %v", n, err)
			}
			if cr.n != 4 {
				t.Fatalf("%d: read %d bytes, want only the prefix", n, cr.n)
			}
			if alloc > 4<<10 {
				t.Fatalf("%d: allocated %d bytes", n, alloc)
			}
		}
	})
	t.Run("clean EOF", func(t *testing.T) {
		if _, err := ReadFrame(bytes.NewReader(nil), nil, 100); err != io.EOF {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("short prefix", func(t *testing.T) {
		if _, err := ReadFrame(bytes.NewReader([]byte{0, 0}), nil, 100); err != io.ErrUnexpectedEOF {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("short body", func(t *testing.T) {
		for _, in := range [][]byte{be32(5), append(be32(5), 'a', 'b')} {
			if _, err := ReadFrame(bytes.NewReader(in), nil, 100); err != io.ErrUnexpectedEOF {
				t.Fatalf("%x: got %v", in, err)
			}
		}
	})
	t.Run("consecutive frames", func(t *testing.T) {
		stream := AppendFrame(AppendFrame(nil, []byte("one")), []byte("two"))
		r := bytes.NewReader(stream)
		buf := make([]byte, 0, 16)
		for _, want := range []string{"one", "two"} {
			got, err := ReadFrame(r, buf, 100)
			if err != nil || string(got) != want {
				t.Fatalf("%q %v", got, err)
			}
		}
	})
}

func TestIsFourLetterWord(t *testing.T) {
	for _, w := range []string{"ruok", "srvr", "stat", "mntr", "conf", "cons", "envi", "isro",
		"wchs", "wchp", "wchc", "dump", "dirs", "crst", "srst"} {
		var b [4]byte
		copy(b[:], w)
		got, ok := IsFourLetterWord(b)
		if !ok || got != w {
			t.Errorf("%s: %q %v", w, got, ok)
		}
		if n := int32(binary.BigEndian.Uint32(b[:])); n >= 0 && n <= DefaultMaxData {
			t.Errorf("%s reads as plausible frame length %d", w, n)
		}
	}
	for _, b := range [][4]byte{{0, 0, 0, 44}, {'R', 'U', 'O', 'K'}, {'w', 'c', 'h', 'x'}} {
		if got, ok := IsFourLetterWord(b); ok {
			t.Errorf("%q recognised as %q", b, got)
		}
	}
}

// An encoder with a limit stops taking strings and buffers once past it,
// and its storage never grows far beyond it.
func TestEncoderLimit(t *testing.T) {
	e := NewFrameEncoder(nil)
	e.Limit(1000)
	for i := 0; i < 1000 && !e.Over(); i++ {
		e.String("0123456789")
	}
	if !e.Over() {
		t.Fatal("never over the limit")
	}
	n, c := len(e.Bytes()), cap(e.buf)
	e.Strings(make([]string, 100_000))
	e.Buffer(make([]byte, 1<<20))
	if len(e.Bytes()) > n+8 {
		t.Errorf("grew from %d to %d bytes after passing the limit", n, len(e.Bytes()))
	}
	if c > 1000+64+16 {
		t.Errorf("storage %d bytes for a limit of 1000", c)
	}
	e.Reset()
	if e.Over() {
		t.Error("still over after Reset")
	}
}
