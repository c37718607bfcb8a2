package wire

import (
	"bytes"
	"testing"
)

func BenchmarkEncodeGetDataResponse(b *testing.B) {
	hdr := ReplyHeader{Xid: 42, Zxid: 0x100000010}
	resp := GetDataResponse{Data: bytes.Repeat([]byte("x"), 1024), Stat: testStat}
	e := NewFrameEncoder(make([]byte, 0, 2048))
	b.ReportAllocs()
	for b.Loop() {
		e.Reset()
		hdr.Encode(e)
		resp.Encode(e)
		b.SetBytes(int64(len(e.Frame())))
	}
}

func BenchmarkDecodeSetDataRequest(b *testing.B) {
	e := NewEncoder(nil)
	(&RequestHeader{Xid: 42, Opcode: OpSetData}).Encode(e)
	(&SetDataRequest{Path: "/service/config/leader", Data: bytes.Repeat([]byte("x"), 1024), Version: 7}).Encode(e)
	in := e.Bytes()
	var d Decoder
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		d.Reset(in)
		var h RequestHeader
		var r SetDataRequest
		h.Decode(&d)
		if err := r.Decode(&d); err != nil {
			b.Fatal(err)
		}
	}
}
