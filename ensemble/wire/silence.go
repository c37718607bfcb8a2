package wire

import (
	"strconv"
	"strings"
)

// A session's silence as the leader sees it: how long since the leader
// last heard from the session, and its timeout. coordrun members answer a
// getData of SilencePath(id) with it as JSON, a virtual node like
// /zookeeper/config that no one can write; Apache ZooKeeper has no such
// node and answers NONODE, which a reader takes for "not known".

// silencePrefix is the virtual node's folder; the session id follows in
// hex, as ZooKeeper prints session ids.
const silencePrefix = "/zookeeper/coordrun/silence/0x"

// SilencePath names the virtual node of session id.
func SilencePath(id int64) string {
	return silencePrefix + strconv.FormatUint(uint64(id), 16)
}

// ParseSilencePath is the session id SilencePath named p with.
func ParseSilencePath(p string) (int64, bool) {
	hex, ok := strings.CutPrefix(p, silencePrefix)
	if !ok || hex == "" || len(hex) > 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || id == 0 {
		return 0, false
	}
	return int64(id), true
}

// Silence is the virtual node's data. Tracked is false when the leader
// holds no such session (it ended, or never was).
type Silence struct {
	Tracked   bool  `json:"tracked"`
	SilentMS  int64 `json:"silent_ms"`
	TimeoutMS int64 `json:"timeout_ms"`
}
