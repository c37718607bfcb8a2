package zk

import (
	"encoding/json"

	"github.com/coordrun/coordrun/ensemble/tree"
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

// MaySeeSilence reports whether session s may learn session id's silence:
// its own, or that of a session owning an ephemeral node s may read. A
// client learns session ids from the nodes it reads anyway; one that can
// read none of a session's nodes is answered as for a session nobody
// tracks, so the read tells no one what is alive behind an ACL.
func MaySeeSilence(t *tree.Tree, s Session, id int64) bool {
	return id == s.ID || t.SeesSession(id, s.Auth)
}
