// Package zkengine is the supervisor's engine for the ZooKeeper protocol:
// a coordrun ensemble or Apache ZooKeeper, through coordrun's client and
// its recipes. Records are znodes, the version a znode's version, a
// record's creation revision its czxid; the lock queue is
// recipe.Entry.
package zkengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// Options configure a Conn.
type Options struct {
	// ACL is given to every znode the Conn creates. Nil: the open ACL.
	ACL []wire.ACL
	// InheritACL: a znode created gets its parent's ACL instead (and a
	// folder the ACL of its nearest existing ancestor), for sessions that
	// add records under folders others made: coordrun cron pause, trigger
	// and backfill.
	InheritACL bool
	// Kind names the server: "coordrun" or "zookeeper". Default
	// "coordrun".
	Kind string
	Log  *slog.Logger
}

// Conn is an engine.Conn over a connected client. It does not own the
// client unless made by Dial: Close closes it all the same.
type Conn struct {
	c    *client.Client
	o    Options
	log  *slog.Logger
	kind string
}

var _ engine.Conn = (*Conn)(nil)

// New wraps a connected client.
func New(c *client.Client, o Options) *Conn {
	if o.ACL == nil {
		o.ACL = client.OpenACL
	}
	if o.Kind == "" {
		o.Kind = "coordrun"
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Conn{c: c, o: o, log: log, kind: o.Kind}
}

// Client is the client under the Conn, for what only ZooKeeper has (ACLs,
// four-letter words).
func (z *Conn) Client() *client.Client { return z.c }

// ACL is the ACL of the znodes the Conn creates.
func (z *Conn) ACL() []wire.ACL { return z.o.ACL }

// mappedError keeps the client's error for its message and adds the
// engine's word for it.
type mappedError struct{ kind, err error }

func (e *mappedError) Error() string   { return e.err.Error() }
func (e *mappedError) Unwrap() []error { return []error{e.kind, e.err} }

// mapErr maps the client's errors to the engine's vocabulary.
func mapErr(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wire.ErrNodeExists):
		kind = engine.ErrExists
	case errors.Is(err, wire.ErrBadVersion):
		kind = engine.ErrVersion
	case errors.Is(err, wire.ErrNoNode):
		kind = engine.ErrNotFound
	case errors.Is(err, wire.ErrNoAuth):
		kind = engine.ErrNoAuth
	case errors.Is(err, client.ErrSessionExpired), errors.Is(err, client.ErrClosed):
		kind = engine.ErrSessionLost
	case errors.Is(err, client.ErrConnectionLoss):
		kind = engine.ErrUnreachable
	case errors.Is(err, recipe.ErrNotAcquired):
		kind = engine.ErrNotAcquired
	default:
		return err
	}
	return &mappedError{kind: kind, err: err}
}

func statOf(st wire.Stat) engine.Stat {
	return engine.Stat{Version: engine.Version(st.Version), Created: st.Czxid, Modified: st.Mzxid}
}

// Session.

func (z *Conn) ID() string                     { return fmt.Sprintf("0x%x", z.c.SessionID()) }
func (z *Conn) Kind() string                   { return z.kind }
func (z *Conn) Timeout() time.Duration         { return z.c.SessionTimeout() }
func (z *Conn) Lease() time.Time               { return z.c.Lease() }
func (z *Conn) LeaseUpdates() <-chan time.Time { return z.c.LeaseUpdates() }
func (z *Conn) Done() <-chan struct{}          { return z.c.Done() }
func (z *Conn) Close() error                   { return z.c.Close() }
func (z *Conn) Err() error {
	err := z.c.Err()
	if errors.Is(err, client.ErrClosed) {
		return nil
	}
	return mapErr(err)
}

// Store.

func (z *Conn) aclFor(ctx context.Context, p string) ([]wire.ACL, error) {
	if !z.o.InheritACL {
		return z.o.ACL, nil
	}
	for dir := path.Dir(p); ; dir = path.Dir(dir) {
		acl, _, err := z.c.GetACL(ctx, dir)
		if err == nil || !errors.Is(err, wire.ErrNoNode) || dir == "/" {
			return acl, mapErr(err)
		}
	}
}

func (z *Conn) Create(ctx context.Context, p string, data []byte, mode engine.Mode) (string, engine.Stat, error) {
	acl, err := z.aclFor(ctx, p)
	if err != nil {
		return "", engine.Stat{}, err
	}
	flags := int32(0)
	switch mode {
	case engine.Ephemeral:
		flags = wire.FlagEphemeral
	case engine.Sequential:
		flags = wire.FlagPersistentSequential
	}
	got, st, err := z.c.Create2(ctx, p, data, flags, acl)
	return got, statOf(st), mapErr(err)
}

func (z *Conn) EnsureFolder(ctx context.Context, p string) error {
	acl, err := z.aclFor(ctx, p)
	if err != nil {
		return err
	}
	return mapErr(recipe.EnsurePath(ctx, z.c, p, acl))
}

// Claim is recipe.ClaimOnce. A znode is made at version 0, and a claim
// is won only by the create that made it.
func (z *Conn) Claim(ctx context.Context, p string, data []byte, mine func([]byte) bool) (bool, engine.Version, error) {
	acl, err := z.aclFor(ctx, p)
	if err != nil {
		return false, 0, err
	}
	won, err := recipe.ClaimOnce(ctx, z.c, p, data, recipe.ClaimOptions{ACL: acl, Mine: mine})
	return won, 0, mapErr(err)
}

func (z *Conn) Get(ctx context.Context, p string) ([]byte, engine.Stat, error) {
	b, st, err := z.c.Get(ctx, p)
	return b, statOf(st), mapErr(err)
}

func (z *Conn) GetW(ctx context.Context, p string) ([]byte, engine.Stat, <-chan engine.Event, error) {
	b, st, ch, err := z.c.GetW(ctx, p)
	if err != nil {
		return nil, engine.Stat{}, nil, mapErr(err)
	}
	return b, statOf(st), z.relay(ctx, ch, engine.Changed), nil
}

func (z *Conn) Update(ctx context.Context, p string, data []byte, v engine.Version) (engine.Stat, error) {
	st, err := z.c.Set(ctx, p, data, int32(v))
	return statOf(st), mapErr(err)
}

func (z *Conn) Delete(ctx context.Context, p string, v engine.Version) error {
	return mapErr(z.c.Delete(ctx, p, int32(v)))
}

func (z *Conn) Children(ctx context.Context, p string) ([]string, error) {
	kids, _, err := z.c.Children(ctx, p)
	return kids, mapErr(err)
}

func (z *Conn) ChildrenW(ctx context.Context, p string) ([]string, <-chan engine.Event, error) {
	kids, _, ch, err := z.c.ChildrenW(ctx, p)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	return kids, z.relay(ctx, ch, engine.ChildrenChanged), nil
}

// relay turns the client's watch event into the engine's. A watch the
// server dropped while the session lives (a refused re-arm after a
// reconnect) fires as dropped, so that the caller reads again. It runs
// until the watch fires, ctx ends or the session does: a goroutine per
// watch, not joined, as it holds nothing and ends with ctx.
func (z *Conn) relay(ctx context.Context, ch <-chan client.Event, dropped engine.EventKind) <-chan engine.Event {
	out := make(chan engine.Event, 1)
	go func() {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			var kind engine.EventKind
			switch ev.Type {
			case wire.EventNodeDeleted:
				kind = engine.Deleted
			case wire.EventNodeDataChanged:
				kind = engine.Changed
			case wire.EventNodeChildrenChanged:
				kind = engine.ChildrenChanged
			case wire.EventNodeCreated:
				kind = engine.Changed
			default:
				select {
				case <-z.c.Done():
					return // the session's end, not the record's
				default:
				}
				kind = dropped
			}
			out <- engine.Event{Kind: kind, Path: ev.Path}
		case <-ctx.Done():
		case <-z.c.Done():
		}
	}()
	return out
}
