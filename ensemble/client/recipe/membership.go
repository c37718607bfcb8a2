// Group membership: a persistent record of every member that ever
// registered, and an ephemeral one of the members whose sessions live,
// both as named nodes in two folders, watched as one roster.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Errors of the membership recipe.
var (
	// ErrEvicted ends a Presence whose live node was deleted by another
	// client while the session lived.
	ErrEvicted = errors.New("recipe: live node deleted by another client")
	// ErrWithdrawn ends a Presence that Withdraw ended.
	ErrWithdrawn = errors.New("recipe: withdrawn")
	// ErrBadMemberName: a member name must be one path component.
	ErrBadMemberName = errors.New("recipe: member name must be a non-empty path component")
)

// The group's folders, under its directory.
const (
	allFolder  = "all"
	liveFolder = "live"
)

// Group is a set of named members in one folder:
//
//	<dir>/all/<name>   persistent: every member that registered, until Forget
//	<dir>/live/<name>  ephemeral: the members announced and alive
//
// A member registers once (Register) and announces itself live
// (Announce) when it is ready to serve; its live node goes with its
// session, so a crashed member drops out of Live one session timeout
// after its crash, and stays in All.
//
// A Group holds nothing but its client, folder and ACL: it is safe for
// concurrent use and does not own the client.
type Group struct{ folder }

// NewGroup returns the group in dir. acl is given to the nodes it creates;
// nil means client.OpenACL.
func NewGroup(c *client.Client, dir string, acl []wire.ACL) *Group {
	return &Group{newFolder(c, dir, acl)}
}

// Member is one member's entry: its name and the data it registered or
// announced with.
type Member struct {
	Name string
	Data []byte
}

// Roster is the group at one moment: All registered members and the Live
// ones, each sorted by name.
type Roster struct {
	All  []Member
	Live []Member
}

// IsLive reports whether name is in r.Live.
func (r Roster) IsLive(name string) bool {
	_, ok := findMember(r.Live, name)
	return ok
}

// LiveData returns the data a live member announced with.
func (r Roster) LiveData(name string) ([]byte, bool) { return findMember(r.Live, name) }

func findMember(ms []Member, name string) ([]byte, bool) {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Name >= name })
	if i < len(ms) && ms[i].Name == name {
		return ms[i].Data, true
	}
	return nil, false
}

func checkMemberName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%w: %q", ErrBadMemberName, name)
	}
	return nil
}

func (g *Group) allPath(name string) string  { return path.Join(g.dir, allFolder, name) }
func (g *Group) livePath(name string) string { return path.Join(g.dir, liveFolder, name) }

// Register records name in All with data, or replaces the data of an
// existing record.
func (g *Group) Register(ctx context.Context, name string, data []byte) error {
	if err := checkMemberName(name); err != nil {
		return err
	}
	p := g.allPath(name)
	for {
		_, err := g.c.Create(ctx, p, data, 0, g.acl)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, wire.ErrNoNode):
			if err := EnsurePath(ctx, g.c, path.Dir(p), g.acl); err != nil {
				return err
			}
			continue
		case errors.Is(err, client.ErrConnectionLoss):
			continue // NodeExists next time if it went through
		case !errors.Is(err, wire.ErrNodeExists):
			return fmt.Errorf("register %s: %w", name, err)
		}
		_, err = g.c.Set(ctx, p, data, -1)
		if errors.Is(err, client.ErrConnectionLoss) || errors.Is(err, wire.ErrNoNode) {
			continue // outcome unknown, or forgotten meanwhile
		}
		if err != nil {
			return fmt.Errorf("register %s: %w", name, err)
		}
		return nil
	}
}

// Forget removes name from All. It does not touch a live node.
func (g *Group) Forget(ctx context.Context, name string) error {
	if err := checkMemberName(name); err != nil {
		return err
	}
	if err := deleteConfirmed(ctx, g.c, g.allPath(name)); err != nil {
		return fmt.Errorf("forget %s: %w", name, err)
	}
	return nil
}

// Announce makes name live: it creates the ephemeral node live/<name>
// with data. A name is live at most once: if another session's node holds
// the name (a previous incarnation of this member whose session has not
// expired yet, or another process using the same name), Announce waits
// for that node to go, until ctx ends. Announce does not register name in
// All; call Register first for that.
func (g *Group) Announce(ctx context.Context, name string, data []byte) (*Presence, error) {
	if err := checkMemberName(name); err != nil {
		return nil, err
	}
	p := g.livePath(name)
	for {
		gc := guardedCreate{c: g.c, path: p, data: data, flags: wire.FlagEphemeral, acl: g.acl, ensure: true}
		_, st, err := gc.create(ctx)
		switch {
		case err == nil:
			return g.newPresence(p, st.Czxid), nil
		case !errors.Is(err, wire.ErrNodeExists):
			return nil, fmt.Errorf("announce %s: %w", name, err)
		}
		// Another session's node holds the name: wait for it to go.
		st, ok, ch, err := g.c.ExistsW(ctx, p)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("announce %s: %w", name, err)
		}
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("announce %s: held by session 0x%x: %w", name, st.EphemeralOwner, ctx.Err())
		case <-g.c.Done():
			return nil, fmt.Errorf("announce %s: %w", name, g.c.Err())
		}
	}
}

// Roster reads the group's members.
func (g *Group) Roster(ctx context.Context) (Roster, error) {
	for {
		r, _, _, err := g.read(ctx, false, false)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		return r, err
	}
}

// Watch reports the roster: once at once, then after every change of
// membership (a member registered or forgotten, announced or gone; a
// change of a member's data alone is not reported). The channel holds the
// latest roster only: one the reader has not taken yet is replaced by the
// newer one, so a slow reader skips intermediate rosters but never misses
// the last. It is closed when ctx ends, when the session is lost, or on an
// error the watch cannot recover from.
//
// One goroutine runs per call until then. Each folder's watch is re-armed
// only after it fired, so a long watch leaves no stale registrations.
func (g *Group) Watch(ctx context.Context) <-chan Roster {
	out := make(chan Roster, 1)
	go func() {
		defer close(out)
		var allCh, liveCh <-chan client.Event
		for {
			r, ach, lch, err := g.read(ctx, allCh == nil, liveCh == nil)
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			if err != nil {
				return
			}
			if ach != nil {
				allCh = ach
			}
			if lch != nil {
				liveCh = lch
			}
			select {
			case <-out: // replaced by the newer roster
			default:
			}
			out <- r
			select {
			case <-allCh:
				allCh = nil
			case <-liveCh:
				liveCh = nil
			case <-ctx.Done():
				return
			case <-g.c.Done():
				return
			}
		}
	}()
	return out
}

// read reads the roster, arming a child watch on All and on Live as asked.
// A folder that does not exist yet is empty; its watch then waits for its
// creation.
func (g *Group) read(ctx context.Context, watchAll, watchLive bool) (r Roster, allCh, liveCh <-chan client.Event, err error) {
	if r.All, allCh, err = g.readFolder(ctx, allFolder, watchAll); err != nil {
		return r, nil, nil, err
	}
	if r.Live, liveCh, err = g.readFolder(ctx, liveFolder, watchLive); err != nil {
		return r, nil, nil, err
	}
	return r, allCh, liveCh, nil
}

func (g *Group) readFolder(ctx context.Context, folder string, watch bool) ([]Member, <-chan client.Event, error) {
	dir := path.Join(g.dir, folder)
	var (
		kids []string
		ch   <-chan client.Event
		err  error
	)
	for {
		if watch {
			kids, _, ch, err = g.c.ChildrenW(ctx, dir)
		} else {
			kids, _, err = g.c.Children(ctx, dir)
		}
		if !errors.Is(err, wire.ErrNoNode) {
			break
		}
		if !watch {
			return nil, nil, nil
		}
		_, ok, ech, err := g.c.ExistsW(ctx, dir)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, ech, nil
		}
		// Created meanwhile: list it; the creation watch fires later,
		// unread, at its next change.
	}
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(kids)
	ms := make([]Member, 0, len(kids))
	for _, k := range kids {
		data, _, err := g.c.Get(ctx, path.Join(dir, k))
		if errors.Is(err, wire.ErrNoNode) {
			continue // left since the listing; the watch says so soon
		}
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, Member{Name: k, Data: data})
	}
	return ms, ch, nil
}

// Presence is a member's live node, from Announce until it is gone. Done
// is closed then and Err says why: Withdraw (ErrWithdrawn), a delete by
// another client (ErrEvicted), or the session's end.
//
// A Presence does not create its node again after an eviction: the member
// has been missing from Live meanwhile, and whatever the others did
// without it (the example's leader stops replicating to it) it must catch
// up on before it announces itself again.
//
// Safe for concurrent use. Each Presence runs one goroutine that watches
// its node until it ends. It belongs to the caller of Announce, who alone
// should Withdraw it.
type Presence struct {
	g *Group
	tenure
}

func (g *Group) newPresence(node string, czxid int64) *Presence {
	p := &Presence{g: g}
	p.start(g.c, node, czxid, "presence "+node, ErrEvicted)
	return p
}

// Node is the full path of the live node.
func (p *Presence) Node() string { return p.node }

// Done is closed when the member is no longer live.
func (p *Presence) Done() <-chan struct{} { return p.done }

// Err is nil while the Presence lasts, then ErrWithdrawn, ErrEvicted, or
// the client's error.
func (p *Presence) Err() error { return p.error() }

// Withdraw ends the Presence and deletes the live node, unless it is
// already gone (with the session, too) or no longer this Presence's.
func (p *Presence) Withdraw(ctx context.Context) error {
	p.giveUp(ErrWithdrawn)
	for {
		st, ok, err := p.g.c.Exists(ctx, p.node)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if sessionOver(p.g.c, err) {
			return nil // the node went with the session
		}
		if err != nil {
			return fmt.Errorf("withdraw %s: %w", p.node, err)
		}
		if !ok || st.Czxid != p.czxid {
			return nil
		}
		// The node read is ours; only a delete by someone else followed by
		// a create by another session, both between this read and the
		// delete, could make the delete hit a node not ours.
		err = p.g.c.Delete(ctx, p.node, st.Version)
		switch {
		case err == nil, errors.Is(err, wire.ErrNoNode), sessionOver(p.g.c, err):
			return nil
		case errors.Is(err, client.ErrConnectionLoss), errors.Is(err, wire.ErrBadVersion):
			continue
		}
		return fmt.Errorf("withdraw %s: %w", p.node, err)
	}
}
