package zkengine

import (
	"context"
	"time"

	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// Enter joins the lock queue in dir with recipe.Enter.
func (z *Conn) Enter(ctx context.Context, dir string, info state.HolderInfo) (engine.Entry, error) {
	e, err := recipe.Enter(ctx, z.c, dir, info, recipe.Options{ACL: z.o.ACL, Log: z.log})
	return &entry{e: e}, mapErr(err)
}

// List reads the lock in dir with recipe.List.
func (z *Conn) List(ctx context.Context, dir string) (engine.Queue, error) {
	q, err := recipe.List(ctx, z.c, dir)
	if err != nil {
		return engine.Queue{}, mapErr(err)
	}
	out := engine.Queue{Record: q.Record, Contenders: q.Contenders, Stopping: q.Stopping}
	if q.ACL != nil {
		out.Access, out.Open = recipe.FormatACL(q.ACL), recipe.OpenToAll(q.ACL)
	}
	return out, nil
}

// HolderLingering asks recipe.HolderLingering (coordrun members know a
// session's silence; Apache ZooKeeper does not, and gets "").
func (z *Conn) HolderLingering(ctx context.Context, dir string) (string, error) {
	l, err := recipe.HolderLingering(ctx, z.c, dir)
	return l, mapErr(err)
}

// entry is a recipe.Entry in the engine's terms.
type entry struct{ e *recipe.Entry }

func (x *entry) Dir() string  { return x.e.Dir() }
func (x *entry) Node() string { return x.e.Node() }
func (x *entry) Token() int64 { return x.e.Token() }

func (x *entry) Acquire(ctx context.Context, onStatus func(engine.Status)) error {
	return mapErr(x.e.Acquire(ctx, statusFunc(onStatus)))
}

func (x *entry) TryAcquire(ctx context.Context, onStatus func(engine.Status)) error {
	return mapErr(x.e.TryAcquire(ctx, statusFunc(onStatus)))
}

func statusFunc(f func(engine.Status)) func(recipe.Status) {
	if f == nil {
		return nil
	}
	return func(s recipe.Status) { f(engine.Status(s)) }
}

func (x *entry) UncleanHandoff() bool              { return x.e.UncleanHandoff() }
func (x *entry) MustWait() (time.Duration, string) { return x.e.MustWait() }

// WatchStanding is the recipe's: its losses are state's type, as the
// seam's are.
func (x *entry) WatchStanding(ctx context.Context) <-chan engine.Loss {
	return x.e.WatchStanding(ctx)
}

func (x *entry) Retake(ctx context.Context, l engine.Loss) { x.e.Retake(ctx, l) }

func (x *entry) Release(ctx context.Context) error { return mapErr(x.e.Release(ctx)) }

// Unwrap is the recipe's entry, for what only ZooKeeper has.
func (x *entry) Unwrap() *recipe.Entry { return x.e }
