package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// checkReencode asserts that a successfully decoded record survives another
// encode/decode cycle unchanged. The bytes need not match the input, since
// jute has redundant spellings (null vs empty string, any non-zero bool).
func checkReencode(t *testing.T, got Record) {
	t.Helper()
	again := newLike(got)
	d := NewDecoder(encode(got))
	if err := again.Decode(d); err != nil {
		t.Fatalf("re-decode of %T failed: %v", got, err)
	}
	if d.Remaining() != 0 {
		t.Fatalf("re-decode of %T left %d bytes", got, d.Remaining())
	}
	if !reflect.DeepEqual(got, again) {
		t.Fatalf("re-encode changed the value\nfirst  %+v\nsecond %+v", got, again)
	}
}

func FuzzConnectRequest(f *testing.F) {
	for _, s := range samples() {
		if r, ok := s.rec.(*ConnectRequest); ok {
			f.Add(encode(r))
		}
	}
	f.Add(append(encode(&ConnectRequest{Passwd: []byte{}}), 1, 2, 3))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r ConnectRequest
		if r.Decode(NewDecoder(data)) != nil {
			return
		}
		checkReencode(t, &r)
	})
}

// requestBodies maps each opcode a server decodes to a sample body.
func requestBodies() map[int32]Record {
	return map[int32]Record{
		OpCreate:               &CreateRequest{Path: "/a", Data: []byte("x"), ACL: testACL},
		OpCreate2:              &CreateRequest{Path: "/a", ACL: testACL, Flags: FlagPersistentSequential},
		OpCreateContainer:      &CreateRequest{Path: "/a", Data: []byte{}, ACL: testACL, Flags: FlagContainer},
		OpCreateTTL:            &CreateTTLRequest{Path: "/a", ACL: testACL, Flags: FlagPersistentWithTTL, TTL: 1000},
		OpDelete:               &DeleteRequest{Path: "/a", Version: -1},
		OpExists:               &PathWatchRequest{Path: "/a", Watch: true},
		OpGetData:              &PathWatchRequest{Path: "/a"},
		OpGetChildren:          &PathWatchRequest{Path: "/a", Watch: true},
		OpGetChildren2:         &PathWatchRequest{Path: "/a"},
		OpSetData:              &SetDataRequest{Path: "/a", Data: []byte("v"), Version: 1},
		OpGetACL:               &PathRequest{Path: "/a"},
		OpSync:                 &PathRequest{Path: "/"},
		OpGetAllChildrenNumber: &PathRequest{Path: "/a"},
		OpGetEphemerals:        &PathRequest{Path: "/"},
		OpSetACL:               &SetACLRequest{Path: "/a", ACL: testACL, Version: -1},
		OpCheck:                &CheckVersionRequest{Path: "/a", Version: 2},
		OpMulti:                &MultiRequest{Ops: allMultiOps()[:7]},
		OpMultiRead:            &MultiRequest{Ops: allMultiOps()[7:]},
		OpCheckWatches:         &RemoveWatchesRequest{Path: "/a", Type: WatcherData},
		OpRemoveWatches:        &RemoveWatchesRequest{Path: "/a", Type: WatcherAny},
		OpAuth:                 &AuthPacket{Scheme: "digest", Auth: []byte("u:p")},
		OpSetWatches:           &SetWatches{RelativeZxid: 1, DataWatches: []string{"/a"}},
		OpSetWatches2:          &SetWatches2{RelativeZxid: 1, PersistentRecursiveWatches: []string{"/"}},
		OpAddWatch:             &AddWatchRequest{Path: "/a", Mode: AddWatchPersistent},
		OpPing:                 nil,
		OpCloseSession:         nil,
		OpWhoAmI:               nil,
	}
}

// decodeRequest is what a server does with a frame: header, then the body
// the opcode selects.
func decodeRequest(data []byte) (RequestHeader, Record, error) {
	d := NewDecoder(data)
	var h RequestHeader
	if err := h.Decode(d); err != nil {
		return h, nil, err
	}
	body, ok := RequestForOp(h.Opcode)
	if !ok {
		return h, nil, errors.New("unknown opcode")
	}
	if body != nil {
		if err := body.Decode(d); err != nil {
			return h, nil, err
		}
	}
	return h, body, nil
}

func FuzzRequest(f *testing.F) {
	for op, body := range requestBodies() {
		e := NewEncoder(nil)
		(&RequestHeader{Xid: 1, Opcode: op}).Encode(e)
		if body != nil {
			body.Encode(e)
		}
		if _, got, err := decodeRequest(e.Bytes()); err != nil || !reflect.DeepEqual(got, body) {
			f.Fatalf("seed for %s does not decode: %v", OpName(op), err)
		}
		f.Add(e.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, body, err := decodeRequest(data)
		if err != nil {
			return
		}
		e := NewEncoder(nil)
		h.Encode(e)
		if body != nil {
			body.Encode(e)
		}
		h2, body2, err := decodeRequest(e.Bytes())
		if err != nil {
			t.Fatalf("re-decode failed: %v", err)
		}
		if h != h2 || !reflect.DeepEqual(body, body2) {
			t.Fatalf("re-encode changed the value\nfirst  %+v %+v\nsecond %+v %+v", h, body, h2, body2)
		}
	})
}

func FuzzResponse(f *testing.F) {
	add := func(op int32, r Record) {
		e := NewEncoder(nil)
		(&ReplyHeader{Xid: 1, Zxid: 2}).Encode(e)
		r.Encode(e)
		f.Add(op, e.Bytes())
	}
	add(OpCreate, &CreateResponse{Path: "/a"})
	add(OpCreate2, &Create2Response{Path: "/a", Stat: testStat})
	add(OpExists, &StatResponse{Stat: testStat})
	add(OpGetData, &GetDataResponse{Data: []byte("d"), Stat: testStat})
	add(OpGetACL, &GetACLResponse{ACL: testACL, Stat: testStat})
	add(OpGetChildren, &GetChildrenResponse{Children: []string{"a"}})
	add(OpGetChildren2, &GetChildren2Response{Children: []string{"a"}, Stat: testStat})
	add(OpSync, &SyncResponse{Path: "/"})
	add(OpMulti, &MultiResponse{Results: allMultiResults()})
	add(OpGetEphemerals, &GetEphemeralsResponse{Ephemerals: []string{"/e"}})
	add(OpGetAllChildrenNumber, &GetAllChildrenNumberResponse{TotalNumber: 3})
	add(OpWhoAmI, &WhoAmIResponse{ClientInfo: []ClientInfo{{"ip", "::1"}}})
	add(OpNotification, &WatcherEvent{Type: EventNodeCreated, State: StateSyncConnected, Path: "/a"})
	f.Fuzz(func(t *testing.T, op int32, data []byte) {
		d := NewDecoder(data)
		var h ReplyHeader
		var body Record
		if h.Decode(d) != nil {
			return
		}
		if op == OpNotification {
			body = new(WatcherEvent)
		} else if body, _ = ResponseForOp(op); body == nil {
			return
		}
		if body.Decode(d) != nil {
			return
		}
		checkReencode(t, &h)
		checkReencode(t, body)
	})
}

func FuzzMultiRequest(f *testing.F) {
	f.Add(encode(&MultiRequest{Ops: allMultiOps()}))
	for _, op := range allMultiOps() {
		f.Add(encode(&MultiRequest{Ops: []MultiOp{op}}))
	}
	f.Add(encode(&MultiRequest{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r MultiRequest
		if r.Decode(NewDecoder(data)) != nil {
			return
		}
		checkReencode(t, &r)
	})
}

func FuzzMultiResponse(f *testing.F) {
	f.Add(encode(&MultiResponse{Results: allMultiResults()}))
	for _, res := range allMultiResults() {
		f.Add(encode(&MultiResponse{Results: []MultiResult{res}}))
	}
	f.Add(encode(&MultiResponse{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r MultiResponse
		if r.Decode(NewDecoder(data)) != nil {
			return
		}
		checkReencode(t, &r)
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []byte("hello")), uint16(64))
	f.Add(AppendFrame(nil, nil), uint16(0))
	f.Add(AppendFrame(nil, make([]byte, 100)), uint16(99))
	f.Add([]byte("ruok"), uint16(1024))
	f.Add([]byte{0xff, 0xff, 0xff, 0xfe}, uint16(10))
	f.Fuzz(func(t *testing.T, data []byte, max uint16) {
		buf := make([]byte, 0, 32)
		body, err := ReadFrame(bytes.NewReader(data), buf, int(max))
		if err != nil {
			if !errors.Is(err, ErrFrameTooLarge) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(body) > int(max) || !bytes.Equal(body, data[4:4+len(body)]) {
			t.Fatalf("body %x does not match input %x (max %d)", body, data, max)
		}
		again, err := ReadFrame(bytes.NewReader(AppendFrame(nil, body)), nil, int(max))
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("re-read: %x %v", again, err)
		}
	})
}
