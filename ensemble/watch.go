package ensemble

import (
	"strings"
	"sync"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

type watchKind uint8

const (
	watchData       watchKind = iota // getData, or exists on a node that exists
	watchExist                       // exists on a node that does not exist
	watchChild                       // getChildren
	watchPersistent                  // addWatch PERSISTENT
	watchRecursive                   // addWatch PERSISTENT_RECURSIVE
	numWatchKinds
)

// watcher receives notifications; a client connection.
type watcher interface {
	notify(ev wire.WatcherEvent, zxid int64)
}

// watchManager holds this member's watches. Watches are not replicated: a
// client re-registers them with setWatches when it reconnects elsewhere.
//
// Safe for concurrent use. trigger is called by the FSM under the tree's
// write lock, and registration by readers under its read lock, so no change
// falls between a read and the watch it sets.
type watchManager struct {
	mu      sync.Mutex
	byKind  [numWatchKinds]map[string]map[watcher]struct{}
	byOwner map[watcher]map[watchKey]struct{}
	total   int
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

// trigger fires the watches a change event concerns. One-shot watches are
// consumed; a connection gets at most one notification per event even when
// several of its watches match (as in ZooKeeper).
func (w *watchManager) trigger(ev tree.Event, zxid int64) {
	var typ int32
	var kinds []watchKind
	switch ev.Type {
	case tree.EventCreated:
		typ, kinds = wire.EventNodeCreated, []watchKind{watchData, watchExist}
	case tree.EventDeleted:
		typ, kinds = wire.EventNodeDeleted, []watchKind{watchData, watchExist, watchChild}
	case tree.EventDataChanged:
		typ, kinds = wire.EventNodeDataChanged, []watchKind{watchData, watchExist}
	case tree.EventChildrenChanged:
		typ, kinds = wire.EventNodeChildrenChanged, []watchKind{watchChild}
	default:
		return
	}
	w.mu.Lock()
	var fired map[watcher]struct{}
	fire := func(o watcher) {
		if fired == nil {
			fired = map[watcher]struct{}{}
		}
		fired[o] = struct{}{}
	}
	for _, k := range kinds {
		for o := range w.byKind[k][ev.Path] {
			fire(o)
			w.removeLocked(k, ev.Path, o)
		}
	}
	// Persistent watches stay. A recursive one sees every change below
	// its path except child-list changes, which its creation and deletion
	// events already describe.
	for o := range w.byKind[watchPersistent][ev.Path] {
		fire(o)
	}
	if ev.Type != tree.EventChildrenChanged && len(w.byKind[watchRecursive]) > 0 {
		for p := ev.Path; ; p = parentPath(p) {
			for o := range w.byKind[watchRecursive][p] {
				fire(o)
			}
			if p == "/" {
				break
			}
		}
	}
	w.mu.Unlock()
	e := wire.WatcherEvent{Type: typ, State: wire.StateSyncConnected, Path: ev.Path}
	for o := range fired {
		o.notify(e, zxid)
	}
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
