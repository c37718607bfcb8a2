package client

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/coordrun/coordrun/ensemble/wire"
)

func TestErrorsMatchCodes(t *testing.T) {
	if !errors.Is(ErrSessionExpired, wire.ErrSessionExpired) || !errors.Is(ErrConnectionLoss, wire.ErrConnectionLoss) {
		t.Fatal("sentinels do not match their codes")
	}
	if codeErr(wire.ErrSessionExpired) != ErrSessionExpired || codeErr(wire.ErrConnectionLoss) != ErrConnectionLoss {
		t.Fatal("server session codes not mapped to the sentinels")
	}
	err := opError(wire.OpGetData, "/a", codeErr(wire.ErrNoNode))
	if !errors.Is(err, wire.ErrNoNode) || err.Error() != "getData /a: zk: node does not exist" {
		t.Fatalf("wrapped: %v", err)
	}
}

func TestWatchSetMapping(t *testing.T) {
	w := newWatchSet()
	chans := map[watchKind]chan Event{}
	arm := func() {
		for _, k := range []watchKind{watchData, watchExist, watchChild} {
			ch := make(chan Event, 1)
			chans[k] = ch
			w.add(watchKey{k, "/p"}, ch)
		}
	}
	for _, tc := range []struct {
		typ   int32
		fired []watchKind
	}{
		{wire.EventNodeCreated, []watchKind{watchData, watchExist}},
		{wire.EventNodeDataChanged, []watchKind{watchData, watchExist}},
		{wire.EventNodeDeleted, []watchKind{watchData, watchExist, watchChild}},
		{wire.EventNodeChildrenChanged, []watchKind{watchChild}},
	} {
		w = newWatchSet()
		arm()
		w.fire(wire.WatcherEvent{Type: tc.typ, Path: "/other"})
		w.fire(wire.WatcherEvent{Type: tc.typ, Path: "/p"})
		var got []watchKind
		for _, k := range []watchKind{watchData, watchExist, watchChild} {
			select {
			case ev := <-chans[k]:
				if ev.Type != tc.typ || ev.Path != "/p" {
					t.Fatalf("event %+v", ev)
				}
				got = append(got, k)
			default:
			}
		}
		if !slices.Equal(got, tc.fired) {
			t.Fatalf("type %d fired %v, want %v", tc.typ, got, tc.fired)
		}
	}
	w = newWatchSet()
	ch := make(chan Event, 1)
	w.add(watchKey{watchData, "/a"}, ch)
	w.add(watchKey{watchExist, "/b"}, make(chan Event, 1))
	w.add(watchKey{watchChild, "/a"}, make(chan Event, 1))
	sws := w.setWatches(42)
	if len(sws) != 1 || sws[0].RelativeZxid != 42 || !slices.Equal(sws[0].DataWatches, []string{"/a"}) ||
		!slices.Equal(sws[0].ExistWatches, []string{"/b"}) || !slices.Equal(sws[0].ChildWatches, []string{"/a"}) {
		t.Fatalf("setWatches %+v", sws)
	}
	w.drop(&wire.SetWatches{DataWatches: []string{"/a"}}, wire.ErrNoAuth)
	if ev := <-ch; ev.Type != EventNotWatching || !errors.Is(ev.Err, wire.ErrNoAuth) {
		t.Fatalf("dropped: %+v", ev)
	}
	w.closeAll(ErrClosed)
	late := make(chan Event, 1)
	w.add(watchKey{watchData, "/late"}, late)
	if ev := <-late; ev.Type != EventNotWatching || !errors.Is(ev.Err, ErrClosed) {
		t.Fatalf("armed after close: %+v", ev)
	}
}

func TestSetWatchesBatches(t *testing.T) {
	w := newWatchSet()
	long := string(make([]byte, 1000))
	for i := 0; i < 300; i++ {
		w.add(watchKey{watchData, "/" + long + string(rune('a'+i%26)) + string(rune('a'+i/26))}, make(chan Event, 1))
	}
	sws := w.setWatches(1)
	total := 0
	for _, sw := range sws {
		size := 0
		for _, p := range sw.DataWatches {
			size += len(p)
		}
		if size > maxSetWatchesBytes {
			t.Fatalf("batch of %d bytes", size)
		}
		total += len(sw.DataWatches)
	}
	if len(sws) < 2 || total != 300 {
		t.Fatalf("%d batches, %d paths", len(sws), total)
	}
}

func TestEventQueueNeverBlocks(t *testing.T) {
	q := newEventQueue()
	const n = 3 * eventBuffer
	for i := 0; i < n; i++ {
		q.push(StateEvent{State: StateSuspended, Server: string(rune('a' + i%26))}, false)
	}
	q.push(StateEvent{State: StateClosed}, true)
	q.push(StateEvent{State: StateConnected}, false) // after the final: dropped
	var got []StateEvent
	for ev := range q.ch {
		got = append(got, ev)
	}
	if len(got) != n+1 || got[n].State != StateClosed {
		t.Fatalf("%d events, last %+v", len(got), got[len(got)-1])
	}
	for i := 0; i < n; i++ {
		if got[i].Server != string(rune('a'+i%26)) {
			t.Fatalf("event %d out of order: %+v", i, got[i])
		}
	}
}

func TestOutbox(t *testing.T) {
	o := newOutbox()
	r := func() *request { return newRequest(context.Background(), wire.OpPing, "", nil, nil) }
	a, b, c := r(), r(), r()
	must(t, o.push(a))
	must(t, o.push(b))
	got := o.take()
	o.requeue(got[1:])
	must(t, o.push(c))
	if q := o.take(); len(q) != 2 || q[0] != b || q[1] != c {
		t.Fatalf("requeue order %v", q)
	}
	must(t, o.pushLast(a, ErrClosed))
	if err := o.push(b); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after last: %v", err)
	}
	if left := o.shut(ErrSessionExpired); len(left) != 1 || left[0] != a {
		t.Fatalf("shut returned %v", left)
	}
	if err := o.push(b); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("push after shut: %v", err)
	}
}

func TestNextXidWraps(t *testing.T) {
	var c Client
	c.xid.Store(1<<31 - 2)
	if x := c.nextXid(); x != 1<<31-1 {
		t.Fatalf("xid %d", x)
	}
	if x := c.nextXid(); x != 1 {
		t.Fatalf("xid after wrap %d", x)
	}
}

func TestGate(t *testing.T) {
	var g gate
	g.wait(nil) // open: returns at once
	g.freeze()
	if !g.frozen() {
		t.Fatal("not frozen")
	}
	abort := make(chan struct{})
	close(abort)
	g.wait(abort) // frozen, but aborted
	done := make(chan struct{})
	go func() { g.wait(nil); close(done) }()
	g.thaw()
	<-done
}
