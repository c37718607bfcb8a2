package zk

import (
	"encoding/json"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// SilenceQuery reports whether req reads a session's silence
// (wire.SilencePath) rather than the tree, and whose. Only the leader
// knows the answer, so the member answers it apart from the tree's reads.
func SilenceQuery(req *Request) (int64, bool) {
	if req.Op != wire.OpGetData {
		return 0, false
	}
	return wire.ParseSilencePath(req.Path)
}

// SilenceReply answers a SilenceQuery. The virtual node has a zero stat,
// and a watch asked for is not set: nothing ever changes it as the tree's
// nodes change.
func SilenceReply(xid int32, zxid int64, s wire.Silence) []byte {
	data, _ := json.Marshal(s)
	return reply(xid, zxid, func(e *wire.Encoder) wire.Code {
		(&wire.GetDataResponse{Data: data}).Encode(e)
		return wire.OK
	})
}
