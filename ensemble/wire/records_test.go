package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var testStat = Stat{
	Czxid: 0x100000001, Mzxid: 0x100000002, Ctime: 1700000000000, Mtime: 1700000000001,
	Version: 3, Cversion: 4, Aversion: 5, EphemeralOwner: 0x7fabcdef01234567,
	DataLength: 6, NumChildren: 7, Pzxid: 0x100000003,
}

var testACL = []ACL{
	{Perms: PermAll, ID: ID{Scheme: "world", ID: "anyone"}},
	{Perms: PermRead | PermWrite, ID: ID{Scheme: "digest", ID: "u:p"}},
}

// allMultiOps has one operation of every type a multi may carry.
func allMultiOps() []MultiOp {
	return []MultiOp{
		{Type: OpCreate, Path: "/a", Data: []byte("x"), ACL: testACL, Flags: FlagEphemeral},
		{Type: OpCreate2, Path: "/b", Data: nil, ACL: testACL, Flags: FlagPersistentSequential},
		{Type: OpCreateContainer, Path: "/c", Data: []byte{}, ACL: []ACL{}, Flags: FlagContainer},
		{Type: OpCreateTTL, Path: "/d", Data: []byte("ttl"), ACL: testACL, Flags: FlagPersistentWithTTL, TTL: 60000},
		{Type: OpDelete, Path: "/e", Version: -1},
		{Type: OpSetData, Path: "/f", Data: []byte("new"), Version: 9},
		{Type: OpCheck, Path: "/g", Version: 2},
		{Type: OpGetData, Path: "/h"},
		{Type: OpGetChildren, Path: "/i"},
	}
}

// allMultiResults has one result of every type a multi reply may carry.
func allMultiResults() []MultiResult {
	return []MultiResult{
		{Type: OpCreate, Path: "/a0000000001"},
		{Type: OpCreate2, Path: "/b", Stat: testStat},
		{Type: OpCreateContainer, Path: "/c", Stat: testStat},
		{Type: OpCreateTTL, Path: "/d", Stat: testStat},
		{Type: OpDelete},
		{Type: OpCheck},
		{Type: OpSetData, Stat: testStat},
		{Type: OpGetData, Data: []byte("payload"), Stat: testStat},
		{Type: OpGetData, Data: nil, Stat: testStat},
		{Type: OpGetChildren, Children: []string{"x", "y"}},
		{Type: OpGetChildren, Children: nil},
		{Type: OpError, Err: ErrNoNode},
		{Type: OpError, Err: OK},
	}
}

type sample struct {
	name string
	rec  Record
}

// samples holds a populated value of every record type, plus the variants
// whose encodings differ in interesting ways (optional trailing byte, null
// versus empty buffers and vectors).
func samples() []sample {
	pw := bytes.Repeat([]byte{0xa5}, 16)
	return []sample{
		{"ConnectRequest/go-zk", &ConnectRequest{Timeout: 4000, Passwd: make([]byte, 16)}},
		{"ConnectRequest/readonly", &ConnectRequest{ProtocolVersion: 0, LastZxidSeen: 42, Timeout: 30000, SessionID: 0x1234, Passwd: pw, ReadOnly: true, HasReadOnly: true}},
		{"ConnectRequest/readonly-false", &ConnectRequest{Timeout: 10, Passwd: pw, HasReadOnly: true}},
		{"ConnectRequest/null-passwd", &ConnectRequest{Timeout: 10}},
		{"ConnectResponse/plain", &ConnectResponse{Timeout: 4000, SessionID: 0x55, Passwd: pw}},
		{"ConnectResponse/readonly", &ConnectResponse{Timeout: 4000, SessionID: 0x55, Passwd: pw, ReadOnly: true, HasReadOnly: true}},
		{"ConnectResponse/expired", &ConnectResponse{Passwd: make([]byte, 16), HasReadOnly: true}},
		{"RequestHeader", &RequestHeader{Xid: 7, Opcode: OpGetData}},
		{"ReplyHeader", &ReplyHeader{Xid: 7, Zxid: 0x200000001, Err: ErrNodeExists}},
		{"Stat", &testStat},
		{"ID", &ID{Scheme: "ip", ID: "10.0.0.1/8"}},
		{"ACL", &ACL{Perms: PermAdmin, ID: ID{Scheme: "auth", ID: ""}}},
		{"CreateRequest", &CreateRequest{Path: "/n", Data: []byte("d"), ACL: testACL, Flags: FlagEphemeralSequential}},
		{"CreateRequest/null", &CreateRequest{Path: "/n"}},
		{"CreateRequest/empty", &CreateRequest{Path: "/n", Data: []byte{}, ACL: []ACL{}}},
		{"CreateTTLRequest", &CreateTTLRequest{Path: "/t", Data: []byte("d"), ACL: testACL, Flags: FlagPersistentSequentialWithTTL, TTL: 1 << 40}},
		{"CreateResponse", &CreateResponse{Path: "/n0000000007"}},
		{"Create2Response", &Create2Response{Path: "/n", Stat: testStat}},
		{"DeleteRequest", &DeleteRequest{Path: "/n", Version: -1}},
		{"PathWatchRequest", &PathWatchRequest{Path: "/w", Watch: true}},
		{"PathRequest", &PathRequest{Path: "/p"}},
		{"SetDataRequest", &SetDataRequest{Path: "/s", Data: []byte("v"), Version: 3}},
		{"SetDataRequest/null", &SetDataRequest{Path: "/s", Version: -1}},
		{"SetDataRequest/empty", &SetDataRequest{Path: "/s", Data: []byte{}, Version: -1}},
		{"StatResponse", &StatResponse{Stat: testStat}},
		{"GetDataResponse", &GetDataResponse{Data: []byte("hello"), Stat: testStat}},
		{"GetDataResponse/null", &GetDataResponse{Stat: testStat}},
		{"GetChildrenResponse", &GetChildrenResponse{Children: []string{"a", "b", ""}}},
		{"GetChildrenResponse/empty", &GetChildrenResponse{Children: []string{}}},
		{"GetChildrenResponse/null", &GetChildrenResponse{}},
		{"GetChildren2Response", &GetChildren2Response{Children: []string{"c"}, Stat: testStat}},
		{"SetACLRequest", &SetACLRequest{Path: "/acl", ACL: testACL, Version: 1}},
		{"GetACLResponse", &GetACLResponse{ACL: testACL, Stat: testStat}},
		{"CheckVersionRequest", &CheckVersionRequest{Path: "/c", Version: 5}},
		{"SyncResponse", &SyncResponse{Path: "/sync"}},
		{"AuthPacket", &AuthPacket{Scheme: "digest", Auth: []byte("user:pass")}},
		{"WatcherEvent", &WatcherEvent{Type: EventNodeDataChanged, State: StateSyncConnected, Path: "/w"}},
		{"SetWatches", &SetWatches{RelativeZxid: 99, DataWatches: []string{"/a"}, ExistWatches: []string{}, ChildWatches: []string{"/b", "/c"}}},
		{"SetWatches2", &SetWatches2{RelativeZxid: 99, DataWatches: []string{"/a"}, ChildWatches: []string{"/b"}, PersistentWatches: []string{"/p"}, PersistentRecursiveWatches: []string{"/r", "/s"}}},
		{"AddWatchRequest", &AddWatchRequest{Path: "/aw", Mode: AddWatchPersistentRecursive}},
		{"RemoveWatchesRequest", &RemoveWatchesRequest{Path: "/rw", Type: WatcherAny}},
		{"GetEphemeralsResponse", &GetEphemeralsResponse{Ephemerals: []string{"/e1", "/x/e2"}}},
		{"GetAllChildrenNumberResponse", &GetAllChildrenNumberResponse{TotalNumber: 12345}},
		{"ClientInfo", &ClientInfo{AuthScheme: "ip", User: "127.0.0.1"}},
		{"WhoAmIResponse", &WhoAmIResponse{ClientInfo: []ClientInfo{{"ip", "127.0.0.1"}, {"digest", "bob"}}}},
		{"WhoAmIResponse/null", &WhoAmIResponse{}},
		{"ErrorResponse", &ErrorResponse{Err: int32(ErrBadVersion)}},
		{"MultiRequest", &MultiRequest{Ops: allMultiOps()}},
		{"MultiRequest/empty", &MultiRequest{}},
		{"MultiResponse", &MultiResponse{Results: allMultiResults()}},
		{"MultiResponse/empty", &MultiResponse{}},
	}
}

func newLike(r Record) Record {
	return reflect.New(reflect.TypeOf(r).Elem()).Interface().(Record)
}

func encode(r Record) []byte {
	e := NewEncoder(nil)
	r.Encode(e)
	return e.Bytes()
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b := encode(s.rec)
			d := NewDecoder(b)
			got := newLike(s.rec)
			if err := got.Decode(d); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if d.Remaining() != 0 {
				t.Fatalf("%d bytes left over", d.Remaining())
			}
			if !reflect.DeepEqual(got, s.rec) {
				t.Fatalf("round trip mismatch\n got %+v\nwant %+v", got, s.rec)
			}
		})
	}
}

// TestTruncated decodes every strict prefix of every sample: each must fail
// cleanly, except that a connect record may legitimately stop before its
// optional readOnly byte.
func TestTruncated(t *testing.T) {
	for _, s := range samples() {
		b := encode(s.rec)
		for n := 0; n < len(b); n++ {
			err := newLike(s.rec).Decode(NewDecoder(b[:n]))
			if n == len(b)-1 && optionalTail(s.rec) {
				if err != nil {
					t.Errorf("%s: prefix without readOnly byte: %v", s.name, err)
				}
				continue
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %d of %d bytes: got %v, want ErrMalformed", s.name, n, len(b), err)
			}
		}
	}
}

func optionalTail(r Record) bool {
	switch r := r.(type) {
	case *ConnectRequest:
		return r.HasReadOnly
	case *ConnectResponse:
		return r.HasReadOnly
	}
	return false
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		rec  Record
		hex  string
	}{
		{
			// What go-zookeeper sends: no readOnly byte, 44-byte body.
			"ConnectRequest/go-zk",
			&ConnectRequest{Timeout: 4000, Passwd: make([]byte, 16)},
			`00000000 0000000000000000 00000fa0 0000000000000000
			 00000010 00000000000000000000000000000000`,
		},
		{
			"ConnectRequest/java",
			&ConnectRequest{LastZxidSeen: 0x0102, Timeout: 30000, SessionID: -1, Passwd: []byte{}, ReadOnly: true, HasReadOnly: true},
			`00000000 0000000000000102 00007530 ffffffffffffffff 00000000 01`,
		},
		{
			"ConnectResponse/readonly",
			&ConnectResponse{Timeout: 4000, SessionID: 0x1122334455667788, Passwd: []byte{0xaa, 0xbb}, HasReadOnly: true},
			`00000000 00000fa0 1122334455667788 00000002 aabb 00`,
		},
		{
			"ReplyHeader",
			&ReplyHeader{Xid: -2, Zxid: 5, Err: ErrNoNode},
			`fffffffe 0000000000000005 ffffff9b`,
		},
		{
			"SetDataRequest/null",
			&SetDataRequest{Path: "/a", Version: -1},
			`00000002 2f61 ffffffff ffffffff`,
		},
		{
			"SetDataRequest/empty",
			&SetDataRequest{Path: "/a", Data: []byte{}, Version: -1},
			`00000002 2f61 00000000 ffffffff`,
		},
		{
			"CreateRequest",
			&CreateRequest{Path: "/z", Data: []byte("hi"), ACL: []ACL{{Perms: PermAll, ID: ID{"world", "anyone"}}}, Flags: FlagEphemeral},
			`00000002 2f7a 00000002 6869
			 00000001 0000001f 00000005 776f726c64 00000006 616e796f6e65
			 00000001`,
		},
		{
			"GetChildrenResponse",
			&GetChildrenResponse{Children: []string{"a", "bc"}},
			`00000002 00000001 61 00000002 6263`,
		},
		{
			"MultiRequest/delete+getData",
			&MultiRequest{Ops: []MultiOp{{Type: OpDelete, Path: "/x", Version: -1}, {Type: OpGetData, Path: "/y"}}},
			`00000002 00 ffffffff 00000002 2f78 ffffffff
			 00000004 00 ffffffff 00000002 2f79 00
			 ffffffff 01 ffffffff`,
		},
		{
			"MultiResponse/error",
			&MultiResponse{Results: []MultiResult{{Type: OpError, Err: OK}, {Type: OpError, Err: ErrNoNode}}},
			`ffffffff 00 00000000 00000000
			 ffffffff 00 ffffff9b ffffff9b
			 ffffffff 01 ffffffff`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := mustHex(t, c.hex)
			if got := encode(c.rec); !bytes.Equal(got, want) {
				t.Fatalf("encode\n got %x\nwant %x", got, want)
			}
			got := newLike(c.rec)
			if err := got.Decode(NewDecoder(want)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.rec) {
				t.Fatalf("decode\n got %+v\nwant %+v", got, c.rec)
			}
		})
	}
	if n := len(encode(&ConnectRequest{Timeout: 4000, Passwd: make([]byte, 16)})); n != 44 {
		t.Fatalf("go-zk connect body is %d bytes, want 44", n)
	}
}

func TestConnectReadOnlyOptional(t *testing.T) {
	body := encode(&ConnectRequest{Timeout: 1, Passwd: make([]byte, 16)})
	var r ConnectRequest
	if err := r.Decode(NewDecoder(body)); err != nil || r.HasReadOnly {
		t.Fatalf("without byte: %+v %v", r, err)
	}
	if err := r.Decode(NewDecoder(append(body, 1))); err != nil || !r.HasReadOnly || !r.ReadOnly {
		t.Fatalf("with byte: %+v %v", r, err)
	}
	// Reusing the record must not keep a stale flag.
	if err := r.Decode(NewDecoder(body)); err != nil || r.HasReadOnly || r.ReadOnly {
		t.Fatalf("reuse: %+v %v", r, err)
	}
}

func TestMultiRequestWireMatchesSingleRequests(t *testing.T) {
	// Each op body must be laid out exactly like the standalone request, so
	// the multi can be spliced from them.
	op := MultiOp{Type: OpCreateTTL, Path: "/t", Data: []byte("d"), ACL: testACL, Flags: FlagPersistentWithTTL, TTL: 5}
	e := NewEncoder(nil)
	encodeMultiHeader(e, OpCreateTTL, false, -1)
	(&CreateTTLRequest{Path: op.Path, Data: op.Data, ACL: op.ACL, Flags: op.Flags, TTL: op.TTL}).Encode(e)
	encodeMultiHeader(e, -1, true, -1)
	if got := encode(&MultiRequest{Ops: []MultiOp{op}}); !bytes.Equal(got, e.Bytes()) {
		t.Fatalf("got %x\nwant %x", got, e.Bytes())
	}
}

func TestMultiUnknownType(t *testing.T) {
	e := NewEncoder(nil)
	encodeMultiHeader(e, OpSync, false, -1)
	e.String("/x")
	encodeMultiHeader(e, -1, true, -1)
	var req MultiRequest
	if err := req.Decode(NewDecoder(e.Bytes())); !errors.Is(err, ErrMalformed) || req.Ops != nil {
		t.Fatalf("request: %v %+v", err, req)
	}
	var resp MultiResponse
	if err := resp.Decode(NewDecoder(e.Bytes())); !errors.Is(err, ErrMalformed) || resp.Results != nil {
		t.Fatalf("response: %v %+v", err, resp)
	}
}

func TestMultiMissingTerminator(t *testing.T) {
	e := NewEncoder(nil)
	encodeMultiHeader(e, OpDelete, false, -1)
	(&DeleteRequest{Path: "/x", Version: 1}).Encode(e)
	var req MultiRequest
	if err := req.Decode(NewDecoder(e.Bytes())); !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v", err)
	}
}

func TestRequestForOp(t *testing.T) {
	for op, want := range map[int32]Record{
		OpCreate: &CreateRequest{}, OpCreate2: &CreateRequest{}, OpCreateContainer: &CreateRequest{},
		OpCreateTTL: &CreateTTLRequest{}, OpDelete: &DeleteRequest{},
		OpExists: &PathWatchRequest{}, OpGetData: &PathWatchRequest{}, OpGetChildren: &PathWatchRequest{},
		OpGetChildren2: &PathWatchRequest{}, OpSetData: &SetDataRequest{}, OpGetACL: &PathRequest{},
		OpSync: &PathRequest{}, OpGetAllChildrenNumber: &PathRequest{}, OpGetEphemerals: &PathRequest{},
		OpSetACL: &SetACLRequest{}, OpCheck: &CheckVersionRequest{}, OpMulti: &MultiRequest{},
		OpMultiRead: &MultiRequest{}, OpCheckWatches: &RemoveWatchesRequest{},
		OpRemoveWatches: &RemoveWatchesRequest{}, OpAuth: &AuthPacket{}, OpSetWatches: &SetWatches{},
		OpSetWatches2: &SetWatches2{}, OpAddWatch: &AddWatchRequest{},
	} {
		got, ok := RequestForOp(op)
		if !ok || reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s: got %T %v", OpName(op), got, ok)
		}
	}
	for _, op := range []int32{OpPing, OpCloseSession, OpWhoAmI} {
		if got, ok := RequestForOp(op); got != nil || !ok {
			t.Errorf("%s: got %T %v, want no body", OpName(op), got, ok)
		}
	}
	for _, op := range []int32{OpSASL, OpReconfig, 99, OpNotification} {
		if got, ok := RequestForOp(op); got != nil || ok {
			t.Errorf("%d: got %T %v, want unknown", op, got, ok)
		}
	}
	for _, op := range []int32{OpCreate, OpCreate2, OpExists, OpGetData, OpGetACL, OpGetChildren,
		OpGetChildren2, OpSync, OpMulti, OpGetEphemerals, OpGetAllChildrenNumber, OpWhoAmI} {
		if r, ok := ResponseForOp(op); r == nil || !ok {
			t.Errorf("ResponseForOp(%s) = %T %v", OpName(op), r, ok)
		}
	}
}

func TestCodeErrors(t *testing.T) {
	if !errors.Is(ErrNoNode, ErrNoNode) || !errors.Is(Code(-101), ErrNoNode) {
		t.Fatal("bare code does not match")
	}
	wrapped := fmt.Errorf("get /x: %w", Code(-101))
	if !errors.Is(wrapped, ErrNoNode) || errors.Is(wrapped, ErrNodeExists) {
		t.Fatal("wrapped code does not match")
	}
	var c Code
	if !errors.As(wrapped, &c) || c != ErrNoNode {
		t.Fatalf("errors.As: %v", c)
	}
	if ErrNoNode.Error() != "zk: node does not exist" {
		t.Fatalf("message %q", ErrNoNode.Error())
	}
	if OK.Err() != nil || ErrBadVersion.Err() != ErrBadVersion {
		t.Fatal("Code.Err")
	}
	if got := Code(-9999).Error(); got != "zk: unknown error code -9999" {
		t.Fatalf("unknown: %q", got)
	}
	all := []Code{OK, ErrSystemError, ErrRuntimeInconsistency, ErrDataInconsistency, ErrConnectionLoss,
		ErrMarshallingError, ErrUnimplemented, ErrOperationTimeout, ErrBadArguments, ErrUnknownSession,
		ErrNewConfigNoQuorum, ErrReconfigInProgress, ErrAPIError, ErrNoNode, ErrNoAuth, ErrBadVersion,
		ErrNoChildrenForEphemerals, ErrNodeExists, ErrNotEmpty, ErrSessionExpired, ErrInvalidCallback,
		ErrInvalidACL, ErrAuthFailed, ErrSessionMoved, ErrNotReadOnly, ErrEphemeralOnLocalSession,
		ErrNoWatcher, ErrRequestTimeout, ErrReconfigDisabled, ErrSessionClosedRequireSASLAuth,
		ErrQuotaExceeded, ErrThrottled}
	seen := map[string]Code{}
	for _, c := range all {
		msg := c.Error()
		if strings.Contains(msg, "unknown error code") {
			t.Errorf("%d has no message", c)
		}
		if prev, dup := seen[msg]; dup {
			t.Errorf("%d and %d share message %q", prev, c, msg)
		}
		seen[msg] = c
	}
}

func TestOpName(t *testing.T) {
	ops := []int32{OpNotification, OpCreate, OpDelete, OpExists, OpGetData, OpSetData, OpGetACL,
		OpSetACL, OpGetChildren, OpSync, OpPing, OpGetChildren2, OpCheck, OpMulti, OpCreate2,
		OpReconfig, OpCheckWatches, OpRemoveWatches, OpCreateContainer, OpDeleteContainer,
		OpCreateTTL, OpMultiRead, OpAuth, OpSetWatches, OpSASL, OpGetEphemerals,
		OpGetAllChildrenNumber, OpSetWatches2, OpAddWatch, OpWhoAmI, OpCreateSession,
		OpCloseSession, OpError}
	seen := map[string]bool{}
	for _, op := range ops {
		n := OpName(op)
		if n == "unknown" || seen[n] {
			t.Errorf("OpName(%d) = %q", op, n)
		}
		seen[n] = true
	}
	if OpName(12345) != "unknown" {
		t.Fatal("unknown opcode")
	}
	if OpName(OpGetChildren2) != "getChildren2" {
		t.Fatal(OpName(OpGetChildren2))
	}
}
