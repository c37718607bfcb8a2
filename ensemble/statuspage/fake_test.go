package statuspage

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// fakeSource is a Source over an in-memory tree, for the handler tests.
type fakeSource struct {
	mu       sync.Mutex
	id       string
	reports  []MemberReport
	counters Counters
	nodes    map[string]*fakeNode
	sessions map[int64]bool
	silent   map[int64]SessionState
	zxid     int64
}

type fakeNode struct {
	data   []byte
	stat   Stat
	closed bool // the ACL grants world:anyone nothing
}

func newFakeSource() *fakeSource {
	f := &fakeSource{id: "1", nodes: map[string]*fakeNode{}, sessions: map[int64]bool{}, silent: map[int64]SessionState{}}
	f.put("/", nil, 0)
	f.reports = []MemberReport{
		{ID: "1", Role: "leader", Leader: "1", Term: 3, CommitIndex: 40, AppliedIndex: 40, ClientAddr: "127.0.0.1:2181", PeerAddr: "127.0.0.1:2888",
			Started: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{ID: "2", Role: "follower", Leader: "1", Term: 3, CommitIndex: 40, AppliedIndex: 39, ClientAddr: "127.0.0.1:2182", PeerAddr: "127.0.0.1:2889"},
		{ID: "3", Role: "follower", Leader: "1", Term: 3, CommitIndex: 40, AppliedIndex: 40, ClientAddr: "127.0.0.1:2183", PeerAddr: "127.0.0.1:2890"},
	}
	return f
}

// put creates or replaces the node at p (and its missing parents);
// owner is its ephemeral owner.
func (f *fakeSource) put(p string, data []byte, owner int64) *fakeNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.putLocked(p, data, owner)
}

func (f *fakeSource) putLocked(p string, data []byte, owner int64) *fakeNode {
	if p != "/" {
		if _, ok := f.nodes[path.Dir(p)]; !ok {
			f.putLocked(path.Dir(p), nil, 0)
		}
	}
	f.zxid += 256
	n := f.nodes[p]
	if n == nil {
		n = &fakeNode{stat: Stat{Czxid: f.zxid, Ctime: 1764583200000}}
		f.nodes[p] = n
		if parent := f.nodes[path.Dir(p)]; p != "/" {
			parent.stat.Cversion++
			parent.stat.Pzxid = f.zxid
		}
	}
	n.data = data
	n.stat.Mzxid, n.stat.DataLength, n.stat.EphemeralOwner = f.zxid, int32(len(data)), owner
	if owner != 0 {
		f.sessions[owner] = true
	}
	return n
}

func (f *fakeSource) putJSON(p string, v any, owner int64) *fakeNode {
	b, _ := json.Marshal(v)
	return f.put(p, b, owner)
}

func (f *fakeSource) remove(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.nodes, p)
	if parent := f.nodes[path.Dir(p)]; parent != nil {
		f.zxid += 256
		parent.stat.Pzxid = f.zxid
	}
}

func (f *fakeSource) ID() string { return f.id }

func (f *fakeSource) Ensemble(context.Context) []MemberReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]MemberReport(nil), f.reports...)
}

func (f *fakeSource) Counters() Counters {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters
}

func (f *fakeSource) ReadTree(fn func(Tree)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(fakeTree{f})
}

func (f *fakeSource) Session(id int64) SessionState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.silent[id]
}

// fakeTree reads f; f.mu is held.
type fakeTree struct{ f *fakeSource }

func (t fakeTree) node(p string) (*fakeNode, error) {
	n := t.f.nodes[p]
	if n == nil {
		return nil, ErrNoNode
	}
	return n, nil
}

func (t fakeTree) Get(p string) ([]byte, Stat, error) {
	n, err := t.node(p)
	if err != nil {
		return nil, Stat{}, err
	}
	if n.closed {
		return nil, Stat{}, ErrNoAuth
	}
	return n.data, t.stat(p, n), nil
}

func (t fakeTree) stat(p string, n *fakeNode) Stat {
	st := n.stat
	st.NumChildren = int32(len(t.kids(p)))
	return st
}

func (t fakeTree) kids(p string) []string {
	var out []string
	prefix := strings.TrimSuffix(p, "/") + "/"
	for k := range t.f.nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

func (t fakeTree) FirstChildren(p string, max int, cmp func(a, b string) int) ([]string, Stat, error) {
	n, err := t.node(p)
	if err != nil {
		return nil, Stat{}, err
	}
	if n.closed {
		return nil, Stat{}, ErrNoAuth
	}
	kids := t.kids(p)
	if cmp != nil {
		slices.SortFunc(kids, cmp)
	}
	return kids[:min(max, len(kids))], t.stat(p, n), nil
}

func (t fakeTree) Exists(p string) (Stat, error) {
	n, err := t.node(p)
	if err != nil {
		return Stat{}, err
	}
	return t.stat(p, n), nil
}

func (t fakeTree) ACL(p string) ([]ACL, error) {
	n, err := t.node(p)
	if err != nil {
		return nil, err
	}
	if n.closed {
		return nil, ErrNoAuth
	}
	return []ACL{{Perms: 31, Scheme: "world", ID: "anyone"}}, nil
}

func (t fakeTree) SessionLive(id int64) bool { return t.f.sessions[id] }
