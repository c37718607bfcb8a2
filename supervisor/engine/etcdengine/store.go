package etcdengine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordrun/coordrun/supervisor/engine"
)

// The tree on etcd: a record's key is its path, so that etcdctl shows
// the same names as a ZooKeeper client. A folder's children are the keys
// one path element below it. The prefix's own folder (the prefix without
// its slash) and its ancestors exist implicitly: the user's permissions
// cover the keys under the prefix, not the prefix's parent.
//
// Keys whose last element starts with NUL are the engine's own (a
// folder's sequence counter, the access check) and are never listed.

// seqKey is the counter a folder's sequential names are drawn from.
func seqKey(folder string) string { return folder + "/\x00seq" }

// hidden reports whether a child's name is the engine's own.
func hidden(name string) bool { return strings.HasPrefix(name, "\x00") }

// key checks that p is a path under the prefix and returns its key.
func (c *Conn) key(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("etcd engine: %q is not a clean absolute path", p)
	}
	if !strings.HasPrefix(p+"/", c.prefix) && !c.implicit(p) {
		return "", fmt.Errorf("etcd engine: %q lies outside the key prefix %s (--prefix)", p, c.prefix)
	}
	return p, nil
}

// implicit reports whether folder p exists without a key: the prefix's
// own folder or one of its ancestors.
func (c *Conn) implicit(p string) bool {
	return p == "/" || strings.HasPrefix(c.prefix, p+"/")
}

// parentExists is the compare that p's folder exists, or none when it
// exists implicitly.
func (c *Conn) parentExists(p string) []clientv3.Cmp {
	dir := path.Dir(p)
	if c.implicit(dir) {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dir), ">", 0)}
}

func (c *Conn) countParent(p string) []clientv3.Op {
	dir := path.Dir(p)
	if c.implicit(dir) {
		return nil
	}
	return []clientv3.Op{clientv3.OpGet(dir, clientv3.WithCountOnly())}
}

// parentMissing reads the Else of a failed transaction built with
// countParent at index i.
func parentMissing(resp *clientv3.TxnResponse, i int) bool {
	if len(resp.Responses) <= i {
		return false
	}
	r := resp.Responses[i].GetResponseRange()
	return r != nil && r.Count == 0
}

// mapErr puts an etcd failure into the engine's vocabulary, keeping it
// in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err // the caller's own deadline
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("%w: %w", engine.ErrNoAuth, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", engine.ErrSessionLost, err)
	case isUnavailable(err):
		return fmt.Errorf("%w: %w", engine.ErrUnreachable, err)
	}
	return err
}

func isUnavailable(err error) bool {
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost) || errors.Is(err, rpctypes.ErrLeaderChanged) {
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}

// opErr maps err, naming the operation and path.
func opErr(op, p string, err error) error {
	return fmt.Errorf("%s %s: %w", op, p, mapErr(err))
}

func statOf(kv *mvccpb.KeyValue) engine.Stat {
	return engine.Stat{Version: engine.Version(kv.ModRevision), Created: kv.CreateRevision, Modified: kv.ModRevision}
}

// written is the Stat of a key put by a transaction at revision rev.
func written(rev int64) engine.Stat {
	return engine.Stat{Version: engine.Version(rev), Created: rev, Modified: rev}
}

// Create makes the record at p.
func (c *Conn) Create(ctx context.Context, p string, data []byte, mode engine.Mode) (string, engine.Stat, error) {
	if mode == engine.Sequential {
		return c.createSequential(ctx, p, data)
	}
	k, err := c.key(p)
	if err != nil {
		return "", engine.Stat{}, err
	}
	var opts []clientv3.OpOption
	if mode == engine.Ephemeral {
		opts = append(opts, clientv3.WithLease(c.lease))
	}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)}, c.parentExists(k)...)
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, string(data), opts...)).Else(c.countParent(k)...).Commit()
	if err != nil {
		return "", engine.Stat{}, opErr("create", p, err)
	}
	if !resp.Succeeded {
		if parentMissing(resp, 0) {
			return "", engine.Stat{}, fmt.Errorf("create %s: %w (its folder %s)", p, engine.ErrNotFound, path.Dir(p))
		}
		return "", engine.Stat{}, fmt.Errorf("create %s: %w", p, engine.ErrExists)
	}
	return p, written(resp.Header.Revision), nil
}

// createSequential draws the next number from the folder's counter and
// creates p+number in the same transaction, retrying while others draw.
func (c *Conn) createSequential(ctx context.Context, p string, data []byte) (string, engine.Stat, error) {
	if _, err := c.key(p + "0"); err != nil {
		return "", engine.Stat{}, err
	}
	ck := seqKey(path.Dir(p))
	for {
		g, err := c.cli.Get(ctx, ck)
		if err != nil {
			return "", engine.Stat{}, opErr("create", p, err)
		}
		var n, rev int64
		if len(g.Kvs) > 0 {
			n, _ = strconv.ParseInt(string(g.Kvs[0].Value), 10, 64)
			rev = g.Kvs[0].ModRevision
		}
		name := fmt.Sprintf("%s%010d", p, n)
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(ck), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(name), "=", 0),
		}, c.parentExists(p)...)
		resp, err := c.cli.Txn(ctx).If(cmps...).
			Then(clientv3.OpPut(ck, strconv.FormatInt(n+1, 10)), clientv3.OpPut(name, string(data))).
			Else(c.countParent(p)...).Commit()
		if err != nil {
			return "", engine.Stat{}, opErr("create", p, err)
		}
		if resp.Succeeded {
			return name, written(resp.Header.Revision), nil
		}
		if parentMissing(resp, 0) {
			return "", engine.Stat{}, fmt.Errorf("create %s: %w (its folder %s)", p, engine.ErrNotFound, path.Dir(p))
		}
	}
}

// EnsureFolder creates p and its missing ancestors below the prefix, in
// one transaction of one conditional put per folder.
func (c *Conn) EnsureFolder(ctx context.Context, p string) error {
	if _, err := c.key(p); err != nil {
		return err
	}
	var ops []clientv3.Op
	for d := p; !c.implicit(d); d = path.Dir(d) {
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(d), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(d, "")}, nil))
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return opErr("create folder", p, err)
	}
	return nil
}

// Claim creates p if absent and reports whether this call made it, and
// the version it was made at. A lost reply is resolved by reading the
// record back: if it is there, it is ours exactly when mine says so.
func (c *Conn) Claim(ctx context.Context, p string, data []byte, mine func([]byte) bool) (bool, engine.Version, error) {
	k, err := c.key(p)
	if err != nil {
		return false, 0, err
	}
	tried := false
	for {
		cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)}, c.parentExists(k)...)
		resp, err := c.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, string(data))).
			Else(append(c.countParent(k), clientv3.OpGet(k))...).Commit()
		if err != nil {
			if ctx.Err() == nil && isUnavailable(err) {
				tried = true
				continue // the claim may have happened: the next attempt tells
			}
			return false, 0, opErr("claim", p, err)
		}
		if resp.Succeeded {
			return true, engine.Version(resp.Header.Revision), nil
		}
		if len(c.countParent(k)) > 0 && parentMissing(resp, 0) {
			return false, 0, fmt.Errorf("claim %s: %w (its folder %s)", p, engine.ErrNotFound, path.Dir(p))
		}
		r := resp.Responses[len(resp.Responses)-1].GetResponseRange()
		if r == nil || len(r.Kvs) == 0 {
			continue // deleted meanwhile: try again
		}
		kv := r.Kvs[0]
		if !tried || !mine(kv.Value) {
			return false, engine.Version(kv.ModRevision), nil
		}
		return true, engine.Version(kv.ModRevision), nil
	}
}

// Get reads a record.
func (c *Conn) Get(ctx context.Context, p string) ([]byte, engine.Stat, error) {
	b, st, _, err := c.get(ctx, p)
	return b, st, err
}

func (c *Conn) get(ctx context.Context, p string) ([]byte, engine.Stat, int64, error) {
	k, err := c.key(p)
	if err != nil {
		return nil, engine.Stat{}, 0, err
	}
	resp, err := c.cli.Get(ctx, k)
	if err != nil {
		return nil, engine.Stat{}, 0, opErr("get", p, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, engine.Stat{}, resp.Header.Revision, fmt.Errorf("get %s: %w", p, engine.ErrNotFound)
	}
	return resp.Kvs[0].Value, statOf(resp.Kvs[0]), resp.Header.Revision, nil
}

// GetW reads a record and watches its next change from the revision of
// the read on, so that nothing between the read and the watch is missed.
func (c *Conn) GetW(ctx context.Context, p string) ([]byte, engine.Stat, <-chan engine.Event, error) {
	b, st, rev, err := c.get(ctx, p)
	if err != nil {
		return nil, st, nil, err
	}
	ch := c.watchOnce(ctx, p, "", rev+1, func(ev *clientv3.Event) (engine.Event, bool) {
		if ev.Type == clientv3.EventTypeDelete {
			return engine.Event{Kind: engine.Deleted, Path: p}, true
		}
		return engine.Event{Kind: engine.Changed, Path: p}, true
	}, engine.Event{Kind: engine.Changed, Path: p})
	return b, st, ch, nil
}

// Update replaces a record's data if its mod revision is still v, and
// keeps the lease it is attached to.
func (c *Conn) Update(ctx context.Context, p string, data []byte, v engine.Version) (engine.Stat, error) {
	k, err := c.key(p)
	if err != nil {
		return engine.Stat{}, err
	}
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", int64(v))
	if v == engine.AnyVersion {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	}
	resp, err := c.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, string(data), clientv3.WithIgnoreLease(), clientv3.WithPrevKV())).
		Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return engine.Stat{}, opErr("update", p, err)
	}
	if !resp.Succeeded {
		if r := resp.Responses[0].GetResponseRange(); r == nil || len(r.Kvs) == 0 {
			return engine.Stat{}, fmt.Errorf("update %s: %w", p, engine.ErrNotFound)
		}
		return engine.Stat{}, fmt.Errorf("update %s: %w", p, engine.ErrVersion)
	}
	rev := resp.Header.Revision
	st := engine.Stat{Version: engine.Version(rev), Modified: rev}
	if r := resp.Responses[0].GetResponsePut(); r != nil && r.PrevKv != nil {
		st.Created = r.PrevKv.CreateRevision
	}
	return st, nil
}

// Delete removes a record if its mod revision is still v; a folder only
// if it has no children (its sequence counter goes with it).
func (c *Conn) Delete(ctx context.Context, p string, v engine.Version) error {
	k, err := c.key(p)
	if err != nil {
		return err
	}
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", int64(v))
	if v == engine.AnyVersion {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	}
	// Children are the keys from "<p>/\x01" to the end of "<p>/": the
	// counter "<p>/\x00seq" sorts before them.
	kids := k + "/\x01"
	end := clientv3.GetPrefixRangeEnd(k + "/")
	resp, err := c.cli.Txn(ctx).
		If(cmp, clientv3.Compare(clientv3.CreateRevision(kids), "=", 0).WithRange(end)).
		Then(clientv3.OpDelete(k), clientv3.OpDelete(seqKey(k))).
		Else(clientv3.OpGet(k, clientv3.WithKeysOnly()), clientv3.OpGet(kids, clientv3.WithRange(end), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return opErr("delete", p, err)
	}
	if resp.Succeeded {
		return nil
	}
	if r := resp.Responses[0].GetResponseRange(); r == nil || len(r.Kvs) == 0 {
		return fmt.Errorf("delete %s: %w", p, engine.ErrNotFound)
	}
	if r := resp.Responses[1].GetResponseRange(); r != nil && r.Count > 0 {
		return fmt.Errorf("delete %s: folder not empty (%d keys below it)", p, r.Count)
	}
	return fmt.Errorf("delete %s: %w", p, engine.ErrVersion)
}

// Children lists the names of a folder's children.
func (c *Conn) Children(ctx context.Context, p string) ([]string, error) {
	names, _, err := c.children(ctx, p)
	return names, err
}

// children lists p's children and the revision of the listing, in one
// read with the folder's own key.
func (c *Conn) children(ctx context.Context, p string) ([]string, int64, error) {
	k, err := c.key(p)
	if err != nil {
		return nil, 0, err
	}
	dir := strings.TrimSuffix(k, "/") + "/"
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(k, clientv3.WithCountOnly()),
		clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return nil, 0, opErr("list", p, err)
	}
	if resp.Responses[0].GetResponseRange().Count == 0 && !c.implicit(p) {
		return nil, resp.Header.Revision, fmt.Errorf("list %s: %w", p, engine.ErrNotFound)
	}
	var names []string
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if name, ok := childName(dir, string(kv.Key)); ok {
			names = append(names, name)
		}
	}
	return names, resp.Header.Revision, nil
}

// childName is the name of key if it is a direct child of dir ("<p>/").
func childName(dir, key string) (string, bool) {
	name, ok := strings.CutPrefix(key, dir)
	if !ok || name == "" || strings.Contains(name, "/") || hidden(name) {
		return "", false
	}
	return name, true
}

// ChildrenW lists a folder's children and watches for the next child
// created or deleted, or the folder's deletion.
func (c *Conn) ChildrenW(ctx context.Context, p string) ([]string, <-chan engine.Event, error) {
	names, rev, err := c.children(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	dir := strings.TrimSuffix(p, "/") + "/"
	ch := c.watchOnce(ctx, p, clientv3.GetPrefixRangeEnd(dir), rev+1, func(ev *clientv3.Event) (engine.Event, bool) {
		k := string(ev.Kv.Key)
		if k == p {
			return engine.Event{Kind: engine.ChildrenChanged, Path: p}, ev.Type == clientv3.EventTypeDelete
		}
		if _, ok := childName(dir, k); !ok {
			return engine.Event{}, false
		}
		created := ev.Type == clientv3.EventTypePut && ev.Kv.Version == 1
		return engine.Event{Kind: engine.ChildrenChanged, Path: p}, created || ev.Type == clientv3.EventTypeDelete
	}, engine.Event{Kind: engine.ChildrenChanged, Path: p})
	return names, ch, nil
}

// watchOnce watches key (to end, if set) from rev on and delivers the
// first event match accepts, then stops. If the watch breaks for another
// reason than ctx or the session ending (a compaction, say), it delivers
// broken, so that the reader looks again rather than waits for ever. The
// goroutine is joined by Close.
func (c *Conn) watchOnce(ctx context.Context, key, end string, rev int64, match func(*clientv3.Event) (engine.Event, bool), broken engine.Event) <-chan engine.Event {
	out := make(chan engine.Event, 1)
	opts := []clientv3.OpOption{clientv3.WithRev(rev)}
	if end != "" {
		opts = append(opts, clientv3.WithRange(end))
	}
	// A member cut off from its leader cancels the watch (rather than
	// keeping it silently): the reader then looks again, elsewhere.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := c.cli.Watch(wctx, key, opts...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		for {
			select {
			case resp, ok := <-wch:
				if !ok || resp.Err() != nil || resp.Canceled {
					if ctx.Err() == nil && c.base.Err() == nil {
						out <- broken
					}
					return
				}
				for _, ev := range resp.Events {
					if e, ok := match(ev); ok {
						out <- e
						return
					}
				}
			case <-ctx.Done():
				return
			case <-c.done:
				return
			}
		}
	}()
	return out
}
