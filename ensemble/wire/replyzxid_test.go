package wire

import "testing"

// The zxid is patched in place in an encoded reply: header and body stay
// as they were, and the decoded header carries the new zxid.
func TestPatchReplyZxid(t *testing.T) {
	e := NewFrameEncoder(nil)
	(&ReplyHeader{Xid: 7, Zxid: 3, Err: ErrNoNode}).Encode(e)
	(&SyncResponse{Path: "/a"}).Encode(e)
	frame := e.Frame()
	if z, ok := ReplyZxid(frame); !ok || z != 3 {
		t.Fatalf("ReplyZxid = %d, %v; want 3, true", z, ok)
	}
	PatchReplyZxid(frame, 1<<40)
	d := NewDecoder(frame[4:])
	var h ReplyHeader
	var body SyncResponse
	if h.Decode(d) != nil || body.Decode(d) != nil {
		t.Fatalf("patched frame does not decode: %v", d.Err())
	}
	if h != (ReplyHeader{Xid: 7, Zxid: 1 << 40, Err: ErrNoNode}) || body.Path != "/a" {
		t.Errorf("patched frame = %+v %+v", h, body)
	}

	short := []byte{0, 0, 0, 4, 1, 2, 3, 4}
	if _, ok := ReplyZxid(short); ok {
		t.Error("ReplyZxid of a frame without a header reported one")
	}
	PatchReplyZxid(short, 9)
	if string(short) != string([]byte{0, 0, 0, 4, 1, 2, 3, 4}) {
		t.Errorf("PatchReplyZxid changed a frame without a header: %v", short)
	}
}
