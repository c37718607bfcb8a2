package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// tenure is an ephemeral node held for as long as it stands, the common
// part of a Term and a Presence. It ends once: when its owner gives it up,
// when another client deletes the node (or deletes it and creates another
// at its path) while the session lives, or with the session. One goroutine
// watches the node until then.
type tenure struct {
	c       *client.Client
	node    string
	czxid   int64
	label   string // names the tenure in a session error: "election /x"
	removed error  // why it ends when another client deletes the node

	stop     chan struct{} // closed by giveUp: the watcher exits
	stopOnce sync.Once
	done     chan struct{}

	mu  sync.Mutex // guards err
	err error      // why it ended; set once, before done is closed
}

func (t *tenure) start(c *client.Client, node string, czxid int64, label string, removed error) {
	t.c, t.node, t.czxid, t.label, t.removed = c, node, czxid, label, removed
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go t.watch()
}

func (t *tenure) error() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// end records why the tenure ended, once.
func (t *tenure) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.err = err
	close(t.done)
}

// giveUp ends the tenure with why and stops its watcher; the owner then
// deletes the node.
func (t *tenure) giveUp(why error) {
	t.end(why)
	t.stopOnce.Do(func() { close(t.stop) })
}

func (t *tenure) sessionErr() error {
	select {
	case <-t.c.Done():
		return fmt.Errorf("%s: %w", t.label, t.c.Err())
	default:
		return nil
	}
}

// gone ends the tenure for a node found gone: by another client's delete
// while the session lives, or with the session.
func (t *tenure) gone() {
	if err := sessionEnding(t.c); err != nil {
		t.end(fmt.Errorf("%s: %w", t.label, err))
		return
	}
	t.end(t.removed)
}

// watch ends the tenure when the node is deleted or the session is lost.
// It never creates the node again: whoever deleted it has woken the next
// in line, and the owner must learn of the gap before it comes back.
func (t *tenure) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.stop:
		case <-t.done:
		}
		cancel()
	}()
	for {
		st, ok, ch, err := t.c.ExistsW(ctx, t.node)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, client.ErrConnectionLoss):
			continue
		case err != nil:
			if serr := t.sessionErr(); serr != nil {
				t.end(serr)
			} else {
				t.end(fmt.Errorf("watch %s: %w", t.node, err))
			}
			return
		case !ok || st.Czxid != t.czxid:
			t.gone()
			return
		}
		select {
		case ev := <-ch:
			if ev.Type == wire.EventNodeDeleted {
				t.gone()
				return
			}
			// A data change, or a watch the client could not re-arm:
			// look again.
		case <-t.c.Done():
			t.end(t.sessionErr())
			return
		case <-ctx.Done():
			return
		}
	}
}
