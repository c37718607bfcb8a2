package client

import (
	"sync"

	"github.com/coordrun/coordrun/ensemble/wire"
)

type watchKind uint8

const (
	watchData  watchKind = iota + 1 // getData, or exists on a node that exists
	watchExist                      // exists on a node that does not exist
	watchChild                      // getChildren
)

type watchKey struct {
	kind watchKind
	path string
}

// watchSet is the client's registry of armed one-shot watches, by kind and
// path. Each registration is its own capacity-1 channel that receives
// exactly one Event, so delivery never blocks.
//
// Safe for concurrent use. Registration and firing run on the connection's
// reader goroutine in wire order, which is what orders a notification
// before the reply that follows it.
type watchSet struct {
	mu  sync.Mutex // guards m and err
	m   map[watchKey][]chan Event
	err error // set when the session is lost: later adds are told at once
}

func newWatchSet() *watchSet { return &watchSet{m: map[watchKey][]chan Event{}} }

func (w *watchSet) add(k watchKey, ch chan Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		ch <- Event{Type: EventNotWatching, Path: k.path, Err: w.err}
		return
	}
	w.m[k] = append(w.m[k], ch)
}

// fire delivers a notification to every watch it ends: created and
// data-changed end data and exist watches, deleted ends all three kinds,
// children-changed ends child watches.
func (w *watchSet) fire(ev wire.WatcherEvent) {
	var kinds []watchKind
	switch ev.Type {
	case wire.EventNodeCreated, wire.EventNodeDataChanged:
		kinds = []watchKind{watchData, watchExist}
	case wire.EventNodeDeleted:
		kinds = []watchKind{watchData, watchExist, watchChild}
	case wire.EventNodeChildrenChanged:
		kinds = []watchKind{watchChild}
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range kinds {
		key := watchKey{k, ev.Path}
		for _, ch := range w.m[key] {
			ch <- Event{Type: ev.Type, Path: ev.Path}
		}
		delete(w.m, key)
	}
}

// setWatches returns the armed watches as setWatches requests, split so
// that no request carries more than maxSetWatchesBytes of paths (as the
// Java client does, to stay far below the server's frame limit).
func (w *watchSet) setWatches(relZxid int64) []*wire.SetWatches {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*wire.SetWatches
	var cur *wire.SetWatches
	size := 0
	for k := range w.m {
		if cur == nil || size+len(k.path) > maxSetWatchesBytes {
			cur = &wire.SetWatches{RelativeZxid: relZxid, DataWatches: []string{}, ExistWatches: []string{}, ChildWatches: []string{}}
			out = append(out, cur)
			size = 0
		}
		size += len(k.path)
		switch k.kind {
		case watchData:
			cur.DataWatches = append(cur.DataWatches, k.path)
		case watchExist:
			cur.ExistWatches = append(cur.ExistWatches, k.path)
		case watchChild:
			cur.ChildWatches = append(cur.ChildWatches, k.path)
		}
	}
	return out
}

const maxSetWatchesBytes = 128 << 10

// drop ends the watches of a setWatches request the server refused.
func (w *watchSet) drop(sw *wire.SetWatches, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for kind, paths := range map[watchKind][]string{watchData: sw.DataWatches, watchExist: sw.ExistWatches, watchChild: sw.ChildWatches} {
		for _, p := range paths {
			key := watchKey{kind, p}
			for _, ch := range w.m[key] {
				ch <- Event{Type: EventNotWatching, Path: p, Err: err}
			}
			delete(w.m, key)
		}
	}
}

// closeAll ends every watch with err and makes later adds end at once.
func (w *watchSet) closeAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	for k, chs := range w.m {
		for _, ch := range chs {
			ch <- Event{Type: EventNotWatching, Path: k.path, Err: err}
		}
	}
	w.m = map[watchKey][]chan Event{}
}

func (w *watchSet) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, chs := range w.m {
		n += len(chs)
	}
	return n
}
