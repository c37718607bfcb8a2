package ensemble

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// The member RPCs travel between members only, but a peer port exposed
// by mistake must not let garbage crash a member.

func FuzzReadRPC(f *testing.F) {
	f.Add(appendRPC(nil, rpcTouch, 7, encodeIDs([]int64{1, 2})))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	// The bounds of the accepting side, the one a stranger may reach.
	limit := rpcBounds{propose: 2 << 20}.limit
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			kind, id, payload, err := readRPC(r, limit)
			if err != nil {
				return
			}
			out := appendRPC(nil, kind, id, payload)
			k2, id2, p2, err := readRPC(bufio.NewReader(bytes.NewReader(out)), limit)
			if err != nil || k2 != kind || id2 != id || !bytes.Equal(p2, payload) {
				t.Fatalf("round trip: %v %d/%d %d/%d", err, k2, kind, id2, id)
			}
		}
	})
}

func FuzzProposeReply(f *testing.F) {
	e := wire.NewEncoder(nil)
	e.Long(42)
	o := zk.Outcome{Err: wire.OK, Session: 9, Ops: []zk.OpOutcome{{Path: "/a", Stat: wire.Stat{Czxid: 42}}}}
	o.Encode(e)
	f.Add(byte(rpcPropose), e.Bytes())
	f.Add(byte(rpcError), []byte("not leader"))
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		p, err := decodeProposeReply(kind, b)
		if err != nil {
			return
		}
		e := wire.NewEncoder(nil)
		e.Long(p.index)
		p.out.Encode(e)
		q, err := decodeProposeReply(rpcPropose, e.Bytes())
		if err != nil || q.index != p.index || len(q.out.Ops) != len(p.out.Ops) || q.out.Session != p.out.Session {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzDecodeIDs(f *testing.F) {
	f.Add(encodeIDs([]int64{1, -1, 1 << 40}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids := decodeIDs(b)
		if len(ids) != len(b)/8 {
			t.Fatalf("%d ids from %d bytes", len(ids), len(b))
		}
		if !bytes.Equal(encodeIDs(ids), b[:8*len(ids)]) {
			t.Fatal("round trip differs")
		}
	})
}
