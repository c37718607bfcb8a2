package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

// A semaphore lets at most N contenders hold at once. It is made of locks,
// so that every rule of a lock's handoff (a successor waits out a holder
// whose standing was lost; a holder's job dies before its lease ends)
// holds for each of its N slots, on every engine:
//
//	DIR/gate     a lock: contenders queue here, in creation order. Only
//	             its holder (the head) looks for a slot.
//	DIR/slot-K   a lock for each K in [0, N): holding one is holding the
//	             semaphore, with that slot entry's token and standing.
//	DIR/held/K   an ephemeral marker slot K's holder makes once it holds
//	             and deletes after its slot's release.
//
// Wake-ups: a waiter behind the head watches its predecessor in the gate
// only (the lock's rule). The head, finding every slot marked, watches
// the children of DIR/held: one watch, which the next slot release fires
// (the releaser deletes its marker after its slot is free). So a release
// wakes the head alone; the head takes the slot, then leaves the gate,
// which wakes its successor alone (who becomes the head). Two
// notifications per release, whatever the number of waiters.
//
// The markers are only a hint for waking: the slot locks decide. A slot
// without a marker is tried; one found busy anyway (its marker deleted by
// someone else) is watched on its own until it frees.
//
// Status: a contender in the gate reports its place there; the head,
// once it finds every slot busy, reports Position 0 with HolderNode
// SemaphoreHeld (it is next, waiting for any slot).
//
// Agreement: every entry's record carries N (HolderInfo.Holders). A
// contender, once its gate entry is made, compares its N with every
// contender's in the gate and the slots, and with the plain lock's queue
// in DIR; a plain lock's contender compares with the gate and the slots
// once its entry is made (CheckLockHolders). Each looks after making its
// own entry, and a contender is in the gate or a slot from its entry to
// its release, so that of two that disagree the later sees the earlier.
// A mismatch is ErrHolders, from Enter.
const (
	SemaphoreGate       = "gate"
	SemaphoreHeld       = "held"
	SemaphoreSlotPrefix = "slot-"
)

// MaxHolders bounds N: the head may try every slot and check every
// contender of each.
const MaxHolders = 256

// ErrHolders: contenders of one lock disagree on how many may hold it.
var ErrHolders = errors.New("contenders disagree on the number of holders")

// HoldersError is a disagreement on N, with both values.
type HoldersError struct {
	Dir          string
	Mine, Theirs int
	Node         string // a contender that says Theirs
}

func (e *HoldersError) Error() string {
	return fmt.Sprintf("%s: this contender asks for --holders %d, but %s in the queue asks for %d; every contender of one lock must give the same --holders (or use another lock name)",
		e.Dir, e.Mine, e.Node, e.Theirs)
}

func (e *HoldersError) Unwrap() error { return ErrHolders }

// CheckHolders checks a holder count asked for: 1 to MaxHolders, or 0
// for the default, 1.
func CheckHolders(n int) error {
	if n < 0 || n > MaxHolders {
		return fmt.Errorf("holders %d: want 1 (a lock, the default) to %d", n, MaxHolders)
	}
	return nil
}

// EnterSemaphore joins the semaphore in dir as the contender info, whose
// Holders is its N; with N of 1 it is c.Enter, the lock. The Entry's
// Token, standing and handoff are those of the slot it takes.
func EnterSemaphore(ctx context.Context, c Conn, dir string, info state.HolderInfo) (Entry, error) {
	n := info.HolderCount()
	if n == 1 {
		e, err := c.Enter(ctx, dir, info)
		if err != nil {
			return e, err
		}
		if err := CheckLockHolders(ctx, c, dir); errors.Is(err, ErrHolders) {
			return nil, errors.Join(err, e.Release(ctx))
		}
		return e, nil
	}
	if err := CheckHolders(n); err != nil {
		return nil, err
	}
	gate, err := c.Enter(ctx, path.Join(dir, SemaphoreGate), info)
	if err != nil {
		return nil, err
	}
	s := &semEntry{c: c, dir: dir, info: info, n: n, gate: gate}
	if err := s.untilReached(ctx, func() error { return s.agree(ctx) }); err != nil {
		return nil, errors.Join(err, gate.Release(ctx))
	}
	return s, nil
}

// semEntry is a contender of a semaphore: its gate entry while it waits,
// its slot entry once it holds.
type semEntry struct {
	c    Conn
	dir  string
	info state.HolderInfo
	n    int

	gate   Entry // nil once left
	slot   Entry // set once held
	marker string
}

func (s *semEntry) Dir() string { return s.dir }

func (s *semEntry) Node() string {
	if s.slot != nil {
		return s.slot.Node()
	}
	if s.gate != nil {
		return s.gate.Node()
	}
	return ""
}

func (s *semEntry) Token() int64 {
	if s.slot != nil {
		return s.slot.Token()
	}
	return 0
}

func (s *semEntry) Acquire(ctx context.Context, onStatus func(Status)) error {
	return s.acquire(ctx, false, onStatus)
}

func (s *semEntry) TryAcquire(ctx context.Context, onStatus func(Status)) error {
	return s.acquire(ctx, true, onStatus)
}

func (s *semEntry) acquire(ctx context.Context, try bool, onStatus func(Status)) error {
	if s.slot != nil {
		return nil
	}
	gateAcquire := s.gate.Acquire
	if try {
		gateAcquire = s.gate.TryAcquire
	}
	if err := gateAcquire(ctx, onStatus); err != nil {
		return err
	}
	reported := false
	for {
		if s.slot != nil {
			// Held: mark it (again, if a lost reply left it unknown
			// whether the marker was made), then leave the gate, which
			// wakes the next in it.
			if err := s.untilReached(ctx, func() error { return s.mark(ctx) }); err != nil {
				return err
			}
			err := s.gate.Release(ctx)
			s.gate = nil
			return err
		}
		var wake []<-chan Event
		err := s.untilReached(ctx, func() (err error) {
			wake, err = s.trySlots(ctx)
			return err
		})
		if err != nil {
			return err
		}
		if wake == nil {
			continue
		}
		if !reported && onStatus != nil {
			onStatus(Status{Position: 0, Length: 1, HolderNode: SemaphoreHeld})
			reported = true
		}
		if try {
			return ErrNotAcquired
		}
		if err := s.await(ctx, wake); err != nil {
			return err
		}
	}
}

// untilReached runs f again while it fails only because no member
// answered (ErrUnreachable: a member went away mid-call; the session may
// well live on through another), pausing between tries, until ctx or the
// session ends. The lock queue does the same inside its own calls.
func (s *semEntry) untilReached(ctx context.Context, f func() error) error {
	pause := 50 * time.Millisecond
	for {
		err := f()
		if !errors.Is(err, ErrUnreachable) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-s.c.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, time.Second)
	}
}

func (s *semEntry) heldDir() string { return path.Join(s.dir, SemaphoreHeld) }
func (s *semEntry) slotDir(k int) string {
	return path.Join(s.dir, SemaphoreSlotPrefix+strconv.Itoa(k))
}

// trySlots takes a free slot (wake nil) or returns what to wait for: the
// markers' folder, and each busy slot without a marker.
func (s *semEntry) trySlots(ctx context.Context) (wake []<-chan Event, err error) {
	marked, err := s.c.Children(ctx, s.heldDir())
	if errors.Is(err, ErrNotFound) {
		// The semaphore's first use (or a deleteall): make it once.
		if err := s.c.EnsureFolder(ctx, s.heldDir()); err != nil {
			return nil, err
		}
		marked, err = s.c.Children(ctx, s.heldDir())
	}
	if err != nil {
		return nil, err
	}
	var unmarked []int
	for k := range s.n {
		if slices.Contains(marked, strconv.Itoa(k)) {
			continue
		}
		ok, err := s.takeSlot(ctx, k)
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, nil
		}
		unmarked = append(unmarked, k)
	}
	// Every slot is busy. Watch the markers; a release between the
	// listing and the watch shows as a different listing.
	again, ch, err := s.c.ChildrenW(ctx, s.heldDir())
	if errors.Is(err, ErrNotFound) {
		// Removed meanwhile with the idle semaphore (coordrun lock
		// rm): look again, which makes it anew.
		fired := make(chan Event, 1)
		fired <- Event{Kind: ChildrenChanged, Path: s.heldDir()}
		return []<-chan Event{fired}, nil
	}
	if err != nil {
		return nil, err
	}
	wake = append(wake, ch)
	if !sameNames(marked, again) {
		fired := make(chan Event, 1)
		fired <- Event{Kind: ChildrenChanged, Path: s.heldDir()}
		return append(wake, fired), nil
	}
	for _, k := range unmarked {
		_, ch, err := s.c.ChildrenW(ctx, s.slotDir(k))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if ch != nil {
			wake = append(wake, ch)
		}
	}
	return wake, nil
}

// takeSlot tries slot k without waiting (acquire marks it once held).
func (s *semEntry) takeSlot(ctx context.Context, k int) (bool, error) {
	e, err := s.c.Enter(ctx, s.slotDir(k), s.info)
	if err != nil {
		return false, err
	}
	err = e.TryAcquire(ctx, nil)
	if err != nil {
		// Leave the slot's queue whatever went wrong: an entry left
		// there would hold the slot for a contender that does not run.
		rerr := e.Release(ctx)
		if errors.Is(err, ErrNotAcquired) {
			return false, rerr
		}
		return false, errors.Join(err, rerr)
	}
	s.slot = e
	s.marker = path.Join(s.heldDir(), strconv.Itoa(k))
	return true, nil
}

// mark makes this holder's marker, over a stale one (its owner deletes
// only its own).
func (s *semEntry) mark(ctx context.Context) error {
	for {
		_, _, err := s.c.Create(ctx, s.marker, []byte(s.slot.Node()), Ephemeral)
		if errors.Is(err, ErrNotFound) {
			// The markers' folder went (coordrun lock rm of an idle
			// semaphore, just before this contender came): make it again.
			if err := s.c.EnsureFolder(ctx, s.heldDir()); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, ErrExists) {
			return err
		}
		if err := s.c.Delete(ctx, s.marker, AnyVersion); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
}

// await waits for any of wake.
func (s *semEntry) await(ctx context.Context, wake []<-chan Event) error {
	cases := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	for _, ch := range wake {
		// Each relay ends with its event or with stop; none holds
		// anything once await returns.
		go func() {
			select {
			case <-ch:
				select {
				case cases <- struct{}{}:
				default:
				}
			case <-stop:
			}
		}()
	}
	select {
	case <-cases:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.c.Done():
		return s.c.Err()
	}
}

// agree compares this contender's N with every other's: in the gate, in
// the slots, and in a plain lock's queue in dir.
func (s *semEntry) agree(ctx context.Context) error {
	kids, err := s.c.Children(ctx, s.dir)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if state.QueueSeq(k) >= 0 {
			return &HoldersError{Dir: s.dir, Mine: s.n, Theirs: 1, Node: k}
		}
	}
	dirs := []string{path.Join(s.dir, SemaphoreGate)}
	for _, k := range kids {
		if strings.HasPrefix(k, SemaphoreSlotPrefix) {
			dirs = append(dirs, path.Join(s.dir, k))
		}
	}
	for _, d := range dirs {
		if err := disagreement(ctx, s.c, d, s.n); err != nil {
			return err
		}
	}
	return nil
}

// disagreement finds a contender of the lock in d whose N is not mine.
func disagreement(ctx context.Context, c Locks, d string, mine int) error {
	q, err := c.List(ctx, d)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, x := range q.Contenders {
		if n := x.Info.HolderCount(); n != mine {
			// Named from the lock's folder down, whether the engine
			// lists entries by name or by path.
			node := path.Join(path.Base(d), path.Base(x.Node))
			return &HoldersError{Dir: path.Dir(d), Mine: mine, Theirs: n, Node: node}
		}
	}
	return nil
}

// CheckLockHolders is the plain lock's side of the agreement: a contender
// of the lock in dir, its entry made, checks that no semaphore of the same
// name has contenders. Only a disagreement found is ErrHolders; a check
// that could not be made is no reason to refuse.
func CheckLockHolders(ctx context.Context, c Conn, dir string) error {
	kids, err := c.Children(ctx, dir)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if k == SemaphoreGate || strings.HasPrefix(k, SemaphoreSlotPrefix) {
			if err := disagreement(ctx, c, path.Join(dir, k), 1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *semEntry) UncleanHandoff() bool {
	return s.slot != nil && s.slot.UncleanHandoff()
}

func (s *semEntry) MustWait() (time.Duration, string) {
	if s.slot == nil {
		return 0, ""
	}
	return s.slot.MustWait()
}

func (s *semEntry) WatchStanding(ctx context.Context) <-chan Loss {
	return s.slot.WatchStanding(ctx)
}

func (s *semEntry) Retake(ctx context.Context, l Loss) { s.slot.Retake(ctx, l) }

// Release leaves the slot (then deletes the marker, which wakes the
// head) and the gate, whichever it is in.
func (s *semEntry) Release(ctx context.Context) error {
	var err error
	if s.slot != nil {
		err = s.slot.Release(ctx)
		s.unmark(ctx)
	}
	if s.gate != nil {
		err = errors.Join(err, s.gate.Release(ctx))
	}
	return err
}

// unmark deletes this holder's marker if it is still its own.
func (s *semEntry) unmark(ctx context.Context) {
	b, st, err := s.c.Get(ctx, s.marker)
	if err != nil || string(b) != s.slot.Node() {
		return
	}
	_ = s.c.Delete(ctx, s.marker, st.Version)
}

func sameNames(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// SemaphoreQueue is a semaphore as a reader sees it.
type SemaphoreQueue struct {
	// Holders is N as its contenders' records say it (0: none seen).
	Holders int
	// Holding is each busy slot's holder, in slot order.
	Holding []state.Contender
	// Stopping are holders whose entries someone else deleted and that
	// still stop their jobs, each keeping its slot.
	Stopping []state.RunInfo
	// Waiting is the gate's queue, in order: the first is next.
	Waiting []state.Contender
}

// ListSemaphore reads the semaphore in dir; ok is false when dir holds
// none (a plain lock, or nothing). The reads are not one snapshot. Each
// holder carries the verdict on it where c is a HolderWatcher.
func ListSemaphore(ctx context.Context, c Conn, dir string) (q SemaphoreQueue, ok bool, err error) {
	kids, err := c.Children(ctx, dir)
	if err != nil || !slices.Contains(kids, SemaphoreGate) {
		return q, false, err
	}
	note := func(x state.Contender) { q.Holders = max(q.Holders, x.Info.HolderCount()) }
	gate, err := c.List(ctx, path.Join(dir, SemaphoreGate))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return q, false, err
	}
	for _, x := range gate.Contenders {
		note(x)
		q.Waiting = append(q.Waiting, x)
	}
	var slots []int
	for _, k := range kids {
		if n, err := strconv.Atoi(strings.TrimPrefix(k, SemaphoreSlotPrefix)); err == nil && strings.HasPrefix(k, SemaphoreSlotPrefix) {
			slots = append(slots, n)
		}
	}
	slices.Sort(slots)
	watcher, _ := c.(HolderWatcher)
	for _, k := range slots {
		slot := path.Join(dir, SemaphoreSlotPrefix+strconv.Itoa(k))
		sq, err := c.List(ctx, slot)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return q, false, err
		}
		for _, x := range sq.Contenders {
			if x.Holding {
				if watcher != nil {
					x.Lingering, _ = watcher.HolderLingering(ctx, slot)
				}
				note(x)
				q.Holding = append(q.Holding, x)
			}
		}
		if sq.Stopping != nil {
			q.Stopping = append(q.Stopping, *sq.Stopping)
		}
	}
	return q, true, nil
}
