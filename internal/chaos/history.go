package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
)

// Op kinds.
const (
	OpGet     = "get"     // getData, a local (possibly stale) read
	OpSyncGet = "syncget" // sync, then getData on the same session (pipelined)
	OpSet     = "set"     // setData with version -1
	OpCAS     = "cas"     // setData with an expected version
	OpCreate  = "create"  // create of a persistent node that is never changed again
)

// Outcomes.
const (
	OK         = "ok"
	BadVersion = "badversion"
	Failed     = "failed"  // a definite error: the op did not take effect
	Unknown    = "unknown" // timeout or connection loss: it may have taken effect
)

// Op is one operation of the history. Times are nanoseconds since the
// start of the run.
type Op struct {
	Session int    `json:"session"`
	Kind    string `json:"kind"`
	Key     string `json:"key"`
	Value   string `json:"value,omitempty"`  // written by set, cas, create
	Expect  int32  `json:"expect,omitempty"` // cas: the expected version
	Call    int64  `json:"call"`
	Return  int64  `json:"return"` // -1 when the outcome is unknown
	Outcome string `json:"outcome"`
	Err     string `json:"err,omitempty"`
	Got     string `json:"got,omitempty"` // reads: the data
	Version int32  `json:"version"`       // reads: data version; writes: the new version
	Mzxid   int64  `json:"mzxid,omitempty"`
	Zxid    int64  `json:"zxid,omitempty"` // reply header zxid
	Seq     int    `json:"seq"`            // arrival order of the reply on its session
}

// Arm is a watch set by a reply: a getData watch ("data") on an existing
// node or an exists watch ("exist") on a missing one.
type Arm struct {
	Session   int    `json:"session"`
	Path      string `json:"path"`
	Kind      string `json:"kind"`
	Seq       int    `json:"seq"`
	ReplyZxid int64  `json:"reply_zxid"`
}

// Probe is the last look of a surviving watcher session at an armed path:
// sync, then a read on the same session. If the path changed after the
// watch was set, its event must have arrived before this reply.
type Probe struct {
	Session int    `json:"session"`
	Path    string `json:"path"`
	Seq     int    `json:"seq"`
	Mzxid   int64  `json:"mzxid"` // data: the node's mzxid; exist: its czxid, 0 if missing
}

// SessionRecord is everything a session received, in order.
type SessionRecord struct {
	N        int          `json:"n"`
	ID       int64        `json:"id"`
	Frames   []Frame      `json:"frames"`
	Events   []WatchEvent `json:"events"`
	Survived bool         `json:"survived"` // closed properly at the end, never lost
}

// History is what a run recorded.
type History struct {
	mu       sync.Mutex
	Ops      []Op            `json:"ops"`
	Sessions []SessionRecord `json:"sessions"`
	Arms     []Arm           `json:"arms"`
	Probes   []Probe         `json:"probes"`
	Created  []string        `json:"created"` // acknowledged creates of durable nodes
}

func (h *History) addOp(op Op) {
	h.mu.Lock()
	h.Ops = append(h.Ops, op)
	if op.Kind == OpCreate && op.Outcome == OK {
		h.Created = append(h.Created, op.Key)
	}
	h.mu.Unlock()
}

func (h *History) addArm(a Arm) {
	h.mu.Lock()
	h.Arms = append(h.Arms, a)
	h.mu.Unlock()
}

func (h *History) addProbe(p Probe) {
	h.mu.Lock()
	h.Probes = append(h.Probes, p)
	h.mu.Unlock()
}

func (h *History) addSession(s *session, survived bool) {
	frames, events := s.record()
	h.mu.Lock()
	h.Sessions = append(h.Sessions, SessionRecord{N: s.n, ID: s.id, Frames: frames, Events: events, Survived: survived})
	h.mu.Unlock()
}

// WriteJSONLines writes the history to file, one record a line, each
// tagged with its type.
func (h *History) WriteJSONLines(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	put := func(kind string, v any) {
		_ = enc.Encode(map[string]any{"type": kind, "record": v})
	}
	h.mu.Lock()
	for _, op := range h.Ops {
		put("op", op)
	}
	for _, a := range h.Arms {
		put("arm", a)
	}
	for _, p := range h.Probes {
		put("probe", p)
	}
	for _, s := range h.Sessions {
		put("session", s)
	}
	h.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
