package recipe

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// guardedCreate is a create whose reply may be lost with its connection:
// the one way the recipes make the node they take part with (a lock's
// queue node, a candidate's, a member's live node, a claim). A lost reply
// leaves the outcome unknown; it is resolved, never assumed, by syncing
// the parent (so the read is at least as new as the create) and looking
// for this call's node, which is recognized
//
//   - for a sequential mode, by the name: path is a prefix that holds a
//     nonce of the caller's (lock.go's and election.go's ids);
//   - for another ephemeral node, by its owner, this session;
//   - for a persistent node, by its data (mine).
//
// The failure contract, the same for every user:
//
//   - nil: the node exists and is this call's; its path and stat (the
//     czxid is a fencing token) are returned.
//   - wire.ErrNodeExists (a node that is not sequential): the node exists
//     and is not this call's.
//   - *AccessError: the session may not create it (or its missing parents).
//   - ctx ended (the error wraps ctx.Err()): no ephemeral node of this call
//     is left. A create that may still commit is looked for and deleted,
//     past ctx and bounded by the session timeout, since a queue node or
//     a candidate nobody waits on would hold its place for nobody (for as
//     long as a long-lived session lives); if that fails, the error says
//     the node may be left. A persistent node is never deleted: removing
//     a claim that may have been won would let a second claimant win.
//   - anything else: the create's error, wrapped with what was created.
//
// Connection losses are retried through the client's reconnects; a lost
// session ends the call with its error.
type guardedCreate struct {
	c     *client.Client
	path  string // the node, or for a sequential mode its name's prefix
	data  []byte
	flags int32
	acl   []wire.ACL
	// ensure: missing parents are created with acl (EnsurePath) and the
	// create tried again; otherwise wire.ErrNoNode is returned.
	ensure bool
	// mine recognizes this call's data in a persistent node; nil: equal
	// to data.
	mine func(data []byte) bool
}

func (g *guardedCreate) sequential() bool {
	return g.flags == wire.FlagEphemeralSequential || g.flags == wire.FlagPersistentSequential
}

func (g *guardedCreate) ephemeral() bool {
	return g.flags == wire.FlagEphemeral || g.flags == wire.FlagEphemeralSequential
}

// create makes the node under the contract above.
func (g *guardedCreate) create(ctx context.Context) (string, wire.Stat, error) {
	node, st, err := g.attempt(ctx)
	if err == nil || ctx.Err() == nil {
		return node, st, err
	}
	if !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if !g.ephemeral() {
		return "", st, err
	}
	// Given up while a create may be on its way.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.c.SessionTimeout())
	defer cancel()
	if ferr := g.removeOwn(dctx); ferr != nil {
		return "", wire.Stat{}, fmt.Errorf("%w (and its node may be left: %v)", err, ferr)
	}
	return "", wire.Stat{}, err
}

func (g *guardedCreate) attempt(ctx context.Context) (string, wire.Stat, error) {
	for {
		node, st, err := g.c.Create2(ctx, g.path, g.data, g.flags, g.acl)
		switch {
		case err == nil:
			return node, st, nil
		case errors.Is(err, wire.ErrNoAuth):
			return "", st, accessError(ctx, g.c, path.Dir(g.path), err)
		case ctx.Err() != nil:
			return "", st, fmt.Errorf("create %s: %w", g.path, ctx.Err())
		case errors.Is(err, wire.ErrNoNode) && g.ensure:
			if err := EnsurePath(ctx, g.c, path.Dir(g.path), g.acl); err != nil {
				return "", st, err
			}
			continue
		case errors.Is(err, wire.ErrNodeExists) && !g.sequential(), errors.Is(err, client.ErrConnectionLoss):
		default:
			return "", st, fmt.Errorf("create %s: %w", g.path, err)
		}
		// Unknown outcome, or a node there already: is it this call's?
		node, st, found, ferr := g.find(ctx)
		switch {
		case ferr != nil && ctx.Err() != nil:
			return "", st, fmt.Errorf("create %s: %w", g.path, ctx.Err())
		case ferr != nil:
			return "", st, ferr
		case found:
			return node, st, nil
		case errors.Is(err, wire.ErrNodeExists) && node != "":
			return "", st, fmt.Errorf("create %s: %w", g.path, err)
		}
		// Not there: create again.
	}
}

// find looks for this call's node after a sync of its parent. node is set
// when a node at the path exists, whether or not it is this call's.
func (g *guardedCreate) find(ctx context.Context) (node string, st wire.Stat, found bool, err error) {
	dir := path.Dir(g.path)
	for {
		if err := g.c.Sync(ctx, dir); err != nil {
			if errors.Is(err, client.ErrConnectionLoss) && ctx.Err() == nil {
				continue
			}
			if errors.Is(err, wire.ErrNoNode) {
				return "", st, false, nil
			}
			return "", st, false, fmt.Errorf("sync %s: %w", dir, err)
		}
		node, st, found, err = g.look(ctx)
		if errors.Is(err, client.ErrConnectionLoss) && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, wire.ErrNoNode) {
			return "", st, false, nil
		}
		if err != nil {
			return "", st, false, fmt.Errorf("look for %s: %w", g.path, err)
		}
		return node, st, found, nil
	}
}

// look is one read of find's.
func (g *guardedCreate) look(ctx context.Context) (node string, st wire.Stat, found bool, err error) {
	switch {
	case g.sequential():
		dir, prefix := path.Dir(g.path), path.Base(g.path)
		kids, _, err := g.c.Children(ctx, dir)
		if err != nil {
			return "", st, false, err
		}
		for _, k := range kids {
			if strings.HasPrefix(k, prefix) {
				node = path.Join(dir, k)
				st, ok, err := g.c.Exists(ctx, node)
				return node, st, ok && err == nil, err
			}
		}
		return "", st, false, nil
	case g.ephemeral():
		st, ok, err := g.c.Exists(ctx, g.path)
		if err != nil || !ok {
			return "", st, false, err
		}
		return g.path, st, st.EphemeralOwner == g.c.SessionID(), nil
	}
	data, st, err := g.c.Get(ctx, g.path)
	if err != nil {
		return "", st, false, err
	}
	mine := g.mine
	if mine == nil {
		return g.path, st, string(data) == string(g.data), nil
	}
	return g.path, st, mine(data), nil
}

// removeOwn deletes this call's ephemeral node if a create left one.
func (g *guardedCreate) removeOwn(ctx context.Context) error {
	node, _, found, err := g.find(ctx)
	if err != nil || !found {
		return err
	}
	return deleteConfirmed(ctx, g.c, node)
}
