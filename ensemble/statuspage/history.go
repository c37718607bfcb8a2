package statuspage

import (
	"strings"
	"sync"
	"time"
)

// holderLog remembers the holders of each lock this member saw, for the
// lock's detail view. The folder's record names only the last holder, so
// the page keeps the recent ones itself, in memory: they start again when
// the member restarts, and each member has its own.
//
// Safe for concurrent use.
type holderLog struct {
	mu    sync.Mutex              // guards locks
	locks map[string][]PastHolder // newest first
}

// holdersKept is how many past holders a lock keeps.
const holdersKept = 20

func newHolderLog() *holderLog { return &holderLog{locks: map[string][]PastHolder{}} }

// observe notes the holders of a complete listing of the locks at now.
func (h *holderLog) observe(now time.Time, views []LockView) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(views))
	for _, v := range views {
		if v.Error != "" {
			continue
		}
		seen[v.Name] = true
		h.note(now, v)
	}
	for name, hist := range h.locks {
		if !seen[name] {
			if len(hist) > 0 && hist[0].Gone.IsZero() {
				hist[0].Gone = now
			}
			if len(h.locks) > maxLocks {
				delete(h.locks, name)
			}
		}
	}
}

// note records one lock's holder; h.mu is held.
func (h *holderLog) note(now time.Time, v LockView) {
	hist := h.locks[v.Name]
	cur := ""
	if v.Holder != nil {
		cur = v.Holder.Node
	}
	if len(hist) > 0 && hist[0].Node == cur {
		return
	}
	if len(hist) > 0 && hist[0].Gone.IsZero() {
		hist[0].Gone = now
	}
	if cur != "" {
		p := PastHolder{Node: cur, Token: v.Holder.Token, Host: v.Holder.Host, PID: v.Holder.PID, Since: v.Holder.Since}
		hist = append([]PastHolder{p}, hist...)
		if len(hist) > holdersKept {
			hist = hist[:holdersKept]
		}
	}
	h.locks[v.Name] = hist
}

// history is what is known of the recent holders of lock v: those seen,
// and the last holder the record names when this member did not see it.
func (h *holderLog) history(v LockView) []PastHolder {
	h.mu.Lock()
	out := append([]PastHolder(nil), h.locks[v.Name]...)
	h.mu.Unlock()
	state, node, ok := strings.Cut(v.Record, " ")
	if !ok || node == "" {
		return out
	}
	for _, p := range out {
		if p.Node == node {
			return out
		}
	}
	return append(out, PastHolder{Node: node, Record: state})
}
