package ensemble

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
)

// watchKind is the kind of a watch; package zk decides which kinds a
// request sets and an event fires.
type watchKind = zk.WatchKind

const (
	watchData       = zk.WatchData
	watchExist      = zk.WatchExist
	watchChild      = zk.WatchChild
	watchPersistent = zk.WatchPersistent
	watchRecursive  = zk.WatchRecursive
	numWatchKinds   = zk.NumWatchKinds
)

// watcher receives notifications; a client connection.
type watcher interface {
	// identities are what the READ check of a notification runs
	// against; they must not be modified. Called from the FSM.
	identities() []tree.Identity
	// sessionID is the session the watches belong to, for the
	// four-letter words that list them (wchp, wchc).
	sessionID() int64
	// notifyFrame queues an encoded notification. The frame is shared by
	// every watcher of the event and must not be modified.
	notifyFrame(frame []byte)
}

// watchManager holds this member's watches. Watches are not replicated: a
// client re-registers them with setWatches when it reconnects elsewhere.
//
// Safe for concurrent use. trigger is called by the FSM under the tree's
// write lock, and registration by readers under its read lock, so no change
// falls between a read and the watch it sets. Lock order: the FSM's lock,
// then mu, then a connection's outMu (trigger queues notifications under
// mu, which costs little: readers that would register wait for the FSM's
// lock anyway).
type watchManager struct {
	mu      sync.Mutex // guards byKind, byOwner, total and sets
	byKind  [numWatchKinds]map[string]map[watcher]struct{}
	byOwner map[watcher]map[watchKey]struct{}
	total   int
	sets    []map[watcher]struct{} // trigger's scratch space, under mu
}

type watchKey struct {
	kind watchKind
	path string
}

func newWatchManager() *watchManager {
	w := &watchManager{byOwner: map[watcher]map[watchKey]struct{}{}}
	for i := range w.byKind {
		w.byKind[i] = map[string]map[watcher]struct{}{}
	}
	return w
}

func (w *watchManager) add(k watchKind, path string, o watcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.byKind[k][path]
	if set == nil {
		set = map[watcher]struct{}{}
		w.byKind[k][path] = set
	}
	if _, ok := set[o]; ok {
		return
	}
	set[o] = struct{}{}
	keys := w.byOwner[o]
	if keys == nil {
		keys = map[watchKey]struct{}{}
		w.byOwner[o] = keys
	}
	keys[watchKey{k, path}] = struct{}{}
	w.total++
}

func (w *watchManager) has(k watchKind, path string, o watcher) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.byKind[k][path][o]
	return ok
}

// remove drops one watch and reports whether it existed.
func (w *watchManager) remove(k watchKind, path string, o watcher) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.removeLocked(k, path, o)
}

func (w *watchManager) removeLocked(k watchKind, path string, o watcher) bool {
	set := w.byKind[k][path]
	if _, ok := set[o]; !ok {
		return false
	}
	delete(set, o)
	if len(set) == 0 {
		delete(w.byKind[k], path)
	}
	if keys := w.byOwner[o]; keys != nil {
		delete(keys, watchKey{k, path})
		if len(keys) == 0 {
			delete(w.byOwner, o)
		}
	}
	w.total--
	return true
}

// removeOwner drops every watch of a closed connection.
func (w *watchManager) removeOwner(o watcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.byOwner[o] {
		w.removeLocked(k.kind, k.path, o)
	}
}

// dataTableKinds are the watches ZooKeeper keeps in its data-watch table,
// the one its wchs, wchp and wchc report: data and exists watches, and
// persistent and recursive ones (which sit in its child table too). Child
// watches are in none of those words' answers.
var dataTableKinds = []watchKind{watchData, watchExist, watchPersistent, watchRecursive}

// dataTable is the data-watch table: path → the sessions watching it, and
// session → its watched paths, as session ids in ZooKeeper's 0x form.
// Under mu.
func (w *watchManager) dataTable() (byPath, bySession map[string]map[string]struct{}) {
	byPath, bySession = map[string]map[string]struct{}{}, map[string]map[string]struct{}{}
	add := func(m map[string]map[string]struct{}, key, item string) {
		if m[key] == nil {
			m[key] = map[string]struct{}{}
		}
		m[key][item] = struct{}{}
	}
	for _, k := range dataTableKinds {
		for p, set := range w.byKind[k] {
			for o := range set {
				sid := fmt.Sprintf("0x%x", o.sessionID())
				add(byPath, p, sid)
				add(bySession, sid, p)
			}
		}
	}
	return byPath, bySession
}

// dump answers wchp (byPath) and wchc as ZooKeeper 3.8 does: a path (or
// a session) a line, the sessions (or paths) watching it below, indented
// by a tab, then an empty line. Sorted, where ZooKeeper's order is its
// hash maps'.
func (w *watchManager) dump(byPath bool) string {
	w.mu.Lock()
	paths, sessions := w.dataTable()
	w.mu.Unlock()
	groups := sessions
	if byPath {
		groups = paths
	}
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		b.WriteString(key + "\n")
		for _, item := range slices.Sorted(maps.Keys(groups[key])) {
			b.WriteString("\t" + item + "\n")
		}
	}
	b.WriteString("\n")
	return b.String()
}

// summary answers wchs as ZooKeeper 3.8 does.
func (w *watchManager) summary() string {
	w.mu.Lock()
	paths, sessions := w.dataTable()
	w.mu.Unlock()
	total := 0
	for _, set := range paths {
		total += len(set)
	}
	return fmt.Sprintf("%d connections watching %d paths\nTotal watches:%d\n", len(sessions), len(paths), total)
}

// hasAny reports whether o has any watch registered.
func (w *watchManager) hasAny(o watcher) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byOwner[o]) > 0
}

func (w *watchManager) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// trigger fires the watches a change event concerns. A connection gets at
// most one notification per event even when several of its watches match
// (as in ZooKeeper).
//
// Only sessions that may read what changed are told, as in ZooKeeper since
// the fix for CVE-2024-23944 (3.8.4, 3.9.2): READ on ev.ACL, the node's ACL
// (the parent's for a child-list change) at the moment of the change, checked
// against the identities the connection holds now. There the check covers
// every kind of watch, persistent and recursive ones included, and so it
// does here. A one-shot watch whose owner may not read is consumed all the
// same: ZooKeeper's WatchManager removes it before the connection drops the
// event, so a later change the session may read does not fire it either.
//
// When anyone may read (world:anyone with READ, the common case) no
// watcher's identities are looked at, and the notification is encoded once
// and queued on every connection as the same frame: fan-out allocates
// nothing per watcher.
func (w *watchManager) trigger(ev tree.Event, zxid int64) {
	typ, kinds, recursive, ok := zk.Fires(ev.Type)
	if !ok {
		return
	}
	open := tree.Permitted(ev.ACL, tree.PermRead, nil)
	w.mu.Lock()
	defer w.mu.Unlock()
	sets := w.sets[:0]
	for _, k := range kinds {
		if s := w.byKind[k][ev.Path]; len(s) > 0 {
			sets = append(sets, s)
		}
	}
	// Persistent and recursive watches stay.
	if s := w.byKind[watchPersistent][ev.Path]; len(s) > 0 {
		sets = append(sets, s)
	}
	if recursive && len(w.byKind[watchRecursive]) > 0 {
		for p := ev.Path; ; p = parentPath(p) {
			if s := w.byKind[watchRecursive][p]; len(s) > 0 {
				sets = append(sets, s)
			}
			if p == "/" {
				break
			}
		}
	}
	var frame []byte
	for i, set := range sets {
	watchers:
		for o := range set {
			for _, earlier := range sets[:i] {
				if _, seen := earlier[o]; seen {
					continue watchers
				}
			}
			if !open && !tree.Permitted(ev.ACL, tree.PermRead, o.identities()) {
				continue
			}
			if frame == nil {
				frame = zk.NotificationFrame(wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: ev.Path}, zxid)
			}
			o.notifyFrame(frame)
		}
	}
	for _, k := range kinds {
		for o := range w.byKind[k][ev.Path] {
			w.removeLocked(k, ev.Path, o)
		}
	}
	clear(sets) // no references to sets that may be dropped
	w.sets = sets[:0]
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
