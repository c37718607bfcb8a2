// Leader election over one folder of ephemeral sequential candidate
// nodes: the lowest candidate leads, and every other candidate watches
// only its immediate predecessor, so a leader's end wakes exactly one
// candidate, not the whole field.

package recipe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// Errors of the election.
var (
	// ErrNoLeader: the election has no candidate at the moment.
	ErrNoLeader = errors.New("recipe: election has no leader")
	// ErrDeposed ends a Term whose candidate node was deleted by another
	// client while the session lived. The next candidate may already lead.
	ErrDeposed = errors.New("recipe: leadership lost: candidate node deleted by another client")
	// ErrResigned ends a Term that Resign ended.
	ErrResigned = errors.New("recipe: resigned")
)

// candidatePrefix starts every candidate node's name: "c-<id>-<seq>",
// where id is chosen before the create, so that a candidate whose create
// reply was lost with its connection can find its own node instead of
// leaving a ghost that would lead for a session that thinks it waits.
const candidatePrefix = "c-"

// Election is a leader election held in one folder (created, with its
// parents, on the first Campaign).
//
// An Election holds nothing but its client, folder and ACL, so one value
// may serve any number of goroutines at once: each Campaign has its own
// candidate node and its own Term, and Leader and Observe only read. It
// does not own the client: closing the client ends every Term of it.
type Election struct{ folder }

// NewElection returns the election in dir. acl is given to the nodes it
// creates; nil means client.OpenACL.
func NewElection(c *client.Client, dir string, acl []wire.ACL) *Election {
	return &Election{newFolder(c, dir, acl)}
}

// Leader is a leader of an election as seen at one moment.
type Leader struct {
	// Node is the full path of the leader's candidate node; empty when
	// the election had no candidate (Observe reports that too).
	Node string
	// Value is the data the leader campaigned with.
	Value []byte
	// Token is the candidate node's czxid. It rises with every new leader
	// of the folder, also across ensemble failovers, so a resource can
	// refuse a deposed leader by its lower token.
	Token int64
}

// Campaign enters the election with value and blocks until this candidate
// leads, ctx ends, or the session is lost. On success the returned Term
// says how long the leadership lasts; on any error the candidate node is
// deleted, or gone with the session.
//
// A waiting candidate whose node is deleted by another client while the
// session lives joins again at the end of the queue, with a new node: a
// waiter has nothing to lose but its place, and giving up would silently
// leave a live process out of the election. A leader whose node is
// deleted does not: its Term ends with ErrDeposed (see Term).
func (e *Election) Campaign(ctx context.Context, value []byte) (*Term, error) {
	node, token, err := e.join(ctx, value)
	if err != nil {
		return nil, err
	}
	var own <-chan client.Event // armed on our node while we wait
	for {
		kids, _, err := e.c.Children(ctx, e.dir)
		switch {
		case errors.Is(err, client.ErrConnectionLoss):
			continue
		case errors.Is(err, wire.ErrNoNode):
			kids = nil // the folder was deleted, our node with it
		case err != nil:
			return nil, e.abandon(ctx, node, fmt.Errorf("campaign in %s: %w", e.dir, err))
		}
		cands := sortCandidates(kids)
		pos := -1
		for i, k := range cands {
			if k == path.Base(node) {
				pos = i
			}
		}
		if pos < 0 {
			if err := e.sessionErr(); err != nil {
				return nil, err
			}
			if node, token, err = e.join(ctx, value); err != nil {
				return nil, err
			}
			own = nil
			continue
		}
		if pos == 0 {
			return e.newTerm(node, token), nil
		}
		if own == nil {
			_, ok, ch, err := e.c.ExistsW(ctx, node)
			if err != nil && !errors.Is(err, client.ErrConnectionLoss) {
				return nil, e.abandon(ctx, node, fmt.Errorf("watch %s: %w", node, err))
			}
			if err != nil || !ok {
				continue // look again: gone, or unknown
			}
			own = ch
		}
		pred := path.Join(e.dir, cands[pos-1])
		_, ok, predCh, err := e.c.ExistsW(ctx, pred)
		if err != nil && !errors.Is(err, client.ErrConnectionLoss) {
			return nil, e.abandon(ctx, node, fmt.Errorf("watch %s: %w", pred, err))
		}
		if err != nil || !ok {
			continue
		}
		select {
		case <-predCh:
			// Waking is not winning: an earlier candidate may still lead.
		case <-own:
			own = nil // deleted, changed or not watched any more: look again
		case <-ctx.Done():
			return nil, e.abandon(ctx, node, ctx.Err())
		case <-e.c.Done():
			return nil, e.sessionErr()
		}
	}
}

// join creates a new candidate node and returns its path and czxid. The
// node is named with a fresh id, so that a create whose reply was lost is
// found (guardedCreate).
func (e *Election) join(ctx context.Context, value []byte) (string, int64, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	g := guardedCreate{c: e.c, path: path.Join(e.dir, candidatePrefix+hex.EncodeToString(rnd[:])+"-"), data: value,
		flags: wire.FlagEphemeralSequential, acl: e.acl, ensure: true}
	node, st, err := g.create(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("join election %s: %w", e.dir, err)
	}
	return node, st.Czxid, nil
}

// abandon deletes a waiting candidate's node and returns cause. The delete
// outlives ctx (which may be what ended the wait), bounded by the session
// timeout: a node left behind would lead, one day, for nobody.
func (e *Election) abandon(ctx context.Context, node string, cause error) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.SessionTimeout())
	defer cancel()
	if err := deleteConfirmed(dctx, e.c, node); err != nil {
		return fmt.Errorf("%w (and candidate node %s not removed: %v)", cause, node, err)
	}
	return cause
}

// sessionErr is why the session is over, or nil while it lives.
func (e *Election) sessionErr() error {
	select {
	case <-e.c.Done():
		return fmt.Errorf("election %s: %w", e.dir, e.c.Err())
	default:
		return nil
	}
}

// deleteConfirmed deletes node, retrying when the outcome was lost with the
// connection; a node already gone is success.
func deleteConfirmed(ctx context.Context, c *client.Client, node string) error {
	for {
		err := c.Delete(ctx, node, -1)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if err == nil || errors.Is(err, wire.ErrNoNode) {
			return nil
		}
		return err
	}
}

// Leader returns the election's current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	for {
		l, _, err := e.leader(ctx, false)
		if errors.Is(err, client.ErrConnectionLoss) {
			continue
		}
		if err == nil && l.Node == "" {
			return l, ErrNoLeader
		}
		return l, err
	}
}

// Observe reports the election's leader: once at once, then every time
// the leader changes (another node leads, or the leader's value was
// changed). A Leader with an empty Node means there is no candidate. The
// channel is closed when ctx ends or the session is lost; Observe watches
// only the leader's node (a newer candidate can never overtake it), and
// the folder only while there is no leader.
//
// One goroutine runs per call until then. It sends each change and waits
// for it to be read, so a reader that falls behind sees every leader in
// order.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go func() {
		defer close(out)
		var last Leader
		first := true
		for {
			l, ch, err := e.leader(ctx, true)
			if errors.Is(err, client.ErrConnectionLoss) {
				continue
			}
			if err != nil {
				return
			}
			if first || l.Node != last.Node || !bytes.Equal(l.Value, last.Value) {
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
				first, last = false, l
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			case <-e.c.Done():
				return
			}
		}
	}()
	return out
}

// leader reads the current leader. With watch set it also returns a
// channel that fires when that may have changed: a data watch on the
// leader's node, or, without a leader, a watch on the folder's children
// (or on its creation).
func (e *Election) leader(ctx context.Context, watch bool) (Leader, <-chan client.Event, error) {
	for {
		kids, _, err := e.c.Children(ctx, e.dir)
		if errors.Is(err, wire.ErrNoNode) {
			if !watch {
				return Leader{}, nil, nil
			}
			_, ok, ch, err := e.c.ExistsW(ctx, e.dir)
			if err != nil || !ok {
				return Leader{}, ch, err
			}
			continue // created meanwhile
		}
		if err != nil {
			return Leader{}, nil, err
		}
		var ch <-chan client.Event
		cands := sortCandidates(kids)
		if len(cands) == 0 && watch {
			kids, _, ch, err = e.c.ChildrenW(ctx, e.dir)
			if errors.Is(err, wire.ErrNoNode) {
				continue
			}
			if err != nil {
				return Leader{}, nil, err
			}
			if cands = sortCandidates(kids); len(cands) == 0 {
				return Leader{}, ch, nil
			}
			// A candidate came meanwhile; the child watch fires later,
			// unread, which costs nothing.
		}
		if len(cands) == 0 {
			return Leader{}, nil, nil
		}
		node := path.Join(e.dir, cands[0])
		var data []byte
		var st wire.Stat
		if watch {
			data, st, ch, err = e.c.GetW(ctx, node)
		} else {
			data, st, err = e.c.Get(ctx, node)
		}
		if errors.Is(err, wire.ErrNoNode) {
			continue // it just left
		}
		if err != nil {
			return Leader{}, nil, err
		}
		return Leader{Node: node, Value: data, Token: st.Czxid}, ch, nil
	}
}

// candidateSeq returns the sequence number of a candidate node's name,
// or -1 for a name that is not a candidate's.
func candidateSeq(name string) int64 { return sequenceOf(name, candidatePrefix, true) }

// sortCandidates orders candidate names by sequence number, dropping
// names that are not candidates'.
func sortCandidates(kids []string) []string { return sortSequential(kids, candidateSeq) }

// Term is one leadership won by Campaign: it lasts until Resign, until
// another client deletes the candidate node (ErrDeposed), or until the
// session is lost. Done is closed when it ends and Err says why.
//
// Safe for concurrent use. Each Term runs one goroutine that watches its
// candidate node until the Term ends; Resign, or the end of the client,
// stops it. The Term belongs to the caller of Campaign, who alone should
// Resign it.
//
// How long the leadership is exclusive: no other candidate of the folder
// can lead before this session expires on the server, which is no earlier
// than the client's lease (see Until). A deletion of the node by another
// client is the exception: the next candidate may lead at once, and this
// Term learns of it only when the deletion's notification arrives. Hand
// the resource the Token, and let it refuse lower ones, to close that gap.
type Term struct {
	e     *Election
	token int64
	tenure
}

func (e *Election) newTerm(node string, token int64) *Term {
	t := &Term{e: e, token: token}
	t.start(e.c, node, token, "election "+e.dir, ErrDeposed)
	return t
}

// Node is the full path of the leader's candidate node.
func (t *Term) Node() string { return t.node }

// Token is the candidate node's czxid (see Leader.Token).
func (t *Term) Token() int64 { return t.token }

// Done is closed when the Term ends.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err is nil while the Term lasts, then ErrResigned, ErrDeposed, or the
// client's error (client.ErrSessionExpired, client.ErrClosed).
func (t *Term) Err() error { return t.error() }

// Until is the moment before which no other candidate can lead unless
// someone deletes this candidate's node: the client's lease while the Term
// lasts, the zero time once it ended. It is measured on this host's clock;
// subtract an allowance for clock rate drift before acting on it.
func (t *Term) Until() time.Time {
	select {
	case <-t.done:
		return time.Time{}
	default:
	}
	return t.e.c.Lease()
}

// sessionEnding tells a node deleted by another client from one deleted
// with the session: it returns the client's error if the session is over
// or being closed, nil if the server still serves it. The notification of
// the deletion that closing the session causes can arrive before the
// client knows it is closed; a request sent after it cannot succeed then,
// since a closing client refuses every request queued after its
// closeSession.
func sessionEnding(c *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.SessionTimeout())
	defer cancel()
	for {
		err := c.Sync(ctx, "/")
		switch {
		case errors.Is(err, client.ErrConnectionLoss):
			continue
		case errors.Is(err, client.ErrClosed), errors.Is(err, client.ErrSessionExpired):
			return err
		}
		select {
		case <-c.Done():
			return c.Err()
		default:
			return nil
		}
	}
}

// Resign ends the Term and deletes the candidate node, so that the next
// candidate leads. The Term ends (Done is closed) before the delete is
// sent: the caller must stop acting as leader before anyone else can
// start. If the delete cannot be confirmed before ctx ends, the node stays
// until the session ends, and observers see this candidate lead until
// then; closing the client removes it. With the session over, there is
// nothing to delete: the node went with it.
func (t *Term) Resign(ctx context.Context) error {
	t.giveUp(ErrResigned)
	if err := deleteConfirmed(ctx, t.e.c, t.node); err != nil && !sessionOver(t.e.c, err) {
		return fmt.Errorf("resign %s: %w", t.node, err)
	}
	return nil
}

// sessionOver reports whether err, or the client's state, says the session
// is over or being closed: its ephemeral nodes are gone or going with it.
func sessionOver(c *client.Client, err error) bool {
	if errors.Is(err, client.ErrClosed) || errors.Is(err, client.ErrSessionExpired) {
		return true
	}
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}
