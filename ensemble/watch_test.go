package ensemble

import (
	"fmt"
	"testing"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// countingWatcher is a watcher that counts its notifications.
type countingWatcher struct {
	ids    []tree.Identity
	sid    int64
	frames int
	last   []byte
}

func (w *countingWatcher) identities() []tree.Identity { return w.ids }
func (w *countingWatcher) notifyFrame(f []byte)        { w.frames++; w.last = f }
func (w *countingWatcher) sessionID() int64            { return w.sid }

var (
	watchOps     = tree.Identity{Scheme: "x509", ID: "O=ops"}
	opsReadACL   = []tree.ACL{{Perms: tree.PermRead, Scheme: "x509", ID: "O=ops"}}
	watchLoopIP  = tree.Identity{Scheme: "ip", ID: "127.0.0.1"}
	childChanged = func(acl []tree.ACL) tree.Event {
		return tree.Event{Type: tree.EventChildrenChanged, Path: "/lock", ACL: acl}
	}
)

func herd(wm *watchManager, n int, kind watchKind, ids []tree.Identity) []*countingWatcher {
	ws := make([]*countingWatcher, n)
	for i := range ws {
		ws[i] = &countingWatcher{ids: ids}
		wm.add(kind, "/lock", ws[i])
	}
	return ws
}

// Fan-out allocates per event, never per watcher: the frame is encoded
// once and shared, and an open ACL skips the identity check altogether.
// A restricted ACL costs a check per watcher but no allocation either.
func TestWatchFanOutAllocations(t *testing.T) {
	for name, c := range map[string]struct {
		acl []tree.ACL
		ids []tree.Identity
	}{
		"open ACL":                   {tree.OpenACL, []tree.Identity{watchLoopIP}},
		"restricted ACL, all may":    {opsReadACL, []tree.Identity{watchLoopIP, watchOps}},
		"restricted ACL, none may":   {opsReadACL, []tree.Identity{watchLoopIP}},
		"empty ACL (everyone may)":   {[]tree.ACL{}, nil},
		"no ACL on the event at all": {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var perEvent []float64
			for _, n := range []int{10, 1000} {
				wm := newWatchManager()
				ws := herd(wm, n, watchPersistent, c.ids) // persistent: they stay for every run
				ev := childChanged(c.acl)
				allocs := testing.AllocsPerRun(20, func() { wm.trigger(ev, 7) })
				perEvent = append(perEvent, allocs)
				if allocs > 2 {
					t.Errorf("%d watchers: %.1f allocations per event", n, allocs)
				}
				want := 21 // the warm-up run too
				if tree.Permitted(c.acl, tree.PermRead, nil) == false && len(c.ids) < 2 {
					want = 0
				}
				for i, w := range ws {
					if w.frames != want {
						t.Fatalf("%d watchers: watcher %d got %d notifications, want %d", n, i, w.frames, want)
					}
					if want > 0 && &w.last[0] != &ws[0].last[0] {
						t.Fatalf("watcher %d got its own copy of the frame", i)
					}
				}
			}
			if perEvent[0] != perEvent[1] {
				t.Errorf("allocations per event grow with the watchers: %v for 10 and 1000", perEvent)
			}
		})
	}
}

// One notification per connection and event however many of its watches
// match; one-shot watches are consumed whether delivered or not, and
// persistent ones stay.
func TestWatchTriggerDedupAndConsume(t *testing.T) {
	wm := newWatchManager()
	reader := &countingWatcher{ids: []tree.Identity{watchOps}}
	outsider := &countingWatcher{ids: []tree.Identity{watchLoopIP}}
	for _, w := range []*countingWatcher{reader, outsider} {
		wm.add(watchData, "/a/b", w)
		wm.add(watchChild, "/a/b", w)
		wm.add(watchPersistent, "/a/b", w)
		wm.add(watchRecursive, "/a", w)
		wm.add(watchRecursive, "/", w)
	}
	wm.trigger(tree.Event{Type: tree.EventDeleted, Path: "/a/b", ACL: opsReadACL}, 9)
	if reader.frames != 1 || outsider.frames != 0 {
		t.Fatalf("notifications: reader %d, outsider %d; want 1, 0", reader.frames, outsider.frames)
	}
	var h wire.ReplyHeader
	var e wire.WatcherEvent
	d := wire.NewDecoder(reader.last[4:])
	if h.Decode(d) != nil || e.Decode(d) != nil || h.Xid != wire.XidNotification || h.Zxid != 9 ||
		e != (wire.WatcherEvent{Type: wire.EventNodeDeleted, State: wire.StateSyncConnected, Path: "/a/b"}) {
		t.Fatalf("frame %x: %+v %+v", reader.last, h, e)
	}
	for _, w := range []*countingWatcher{reader, outsider} {
		for _, k := range []watchKind{watchData, watchChild} {
			if wm.has(k, "/a/b", w) {
				t.Errorf("one-shot watch %d left after the event", k)
			}
		}
		if !wm.has(watchPersistent, "/a/b", w) || !wm.has(watchRecursive, "/a", w) {
			t.Error("persistent watches removed")
		}
	}
	if got := wm.count(); got != 6 {
		t.Errorf("%d watches left, want 6", got)
	}
}

func BenchmarkWatchFanOut(b *testing.B) {
	for _, n := range []int{100, 10000} {
		for name, c := range map[string]struct {
			acl []tree.ACL
			ids []tree.Identity
		}{
			"open":       {tree.OpenACL, []tree.Identity{watchLoopIP}},
			"restricted": {opsReadACL, []tree.Identity{watchLoopIP, watchOps}},
		} {
			b.Run(fmt.Sprintf("%s/watchers=%d", name, n), func(b *testing.B) {
				wm := newWatchManager()
				herd(wm, n, watchPersistent, c.ids)
				ev := childChanged(c.acl)
				b.ReportAllocs()
				for b.Loop() {
					wm.trigger(ev, 7)
				}
			})
		}
	}
}

// wchs, wchp and wchc report the data-watch table as ZooKeeper 3.8's
// do (the layout taken from a real 3.8 server): exists and persistent
// watches among them, child watches not; wchp and wchc end with an empty
// line.
func TestWatchDump(t *testing.T) {
	wm := newWatchManager()
	a, b := &countingWatcher{sid: 0x1a}, &countingWatcher{sid: 0x2b}
	wm.add(watchData, "/x", a)
	wm.add(watchExist, "/y", b)
	wm.add(watchData, "/y", a)
	wm.add(watchChild, "/x", b)
	wm.add(watchChild, "/c", b)
	wm.add(watchPersistent, "/p", a)
	for _, c := range []struct{ word, got, want string }{
		{"wchp", wm.dump(true), "/p\n\t0x1a\n/x\n\t0x1a\n/y\n\t0x1a\n\t0x2b\n\n"},
		{"wchc", wm.dump(false), "0x1a\n\t/p\n\t/x\n\t/y\n0x2b\n\t/y\n\n"},
		{"wchs", wm.summary(), "2 connections watching 3 paths\nTotal watches:4\n"},
	} {
		if c.got != c.want {
			t.Errorf("%s:\n%q\nwant:\n%q", c.word, c.got, c.want)
		}
	}
	wm.removeOwner(a)
	if got, want := wm.dump(true), "/y\n\t0x2b\n\n"; got != want {
		t.Errorf("wchp after a connection closed: %q, want %q", got, want)
	}
}
