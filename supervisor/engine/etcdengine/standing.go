package etcdengine

import (
	"context"
	"encoding/json"
	"path"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// LossRevoked: the record went with the session's lease, which another
// client revoked before the lease could expire (etcd only). Whoever did
// it interfered as much as if they had deleted the record; the session
// ends at its proven deadline.
const LossRevoked = "revoked"

// WatchStanding watches the holder's entry and run record from the
// revision it took the lock at, so no change between the take and the
// watch is missed, and delivers the first change by anyone else,
// including a revocation of the session's lease (LossRevoked).
func (e *entry) WatchStanding(ctx context.Context) <-chan engine.Loss {
	out := make(chan engine.Loss, 1)
	run := runKey(e.dir)
	e.c.wg.Add(1)
	go func() {
		defer e.c.wg.Done()
		from := e.runRev + 1
		for {
			l, next, ok := e.watchKeys(ctx, run, from)
			if ok {
				if e.c.base.Err() != nil {
					return // our own Close revoked the lease
				}
				if e.c.leaseRevoked(ctx) {
					l.Event = LossRevoked
				}
				e.recordStopping(ctx)
				e.mu.Lock()
				e.standingOK = false
				e.mu.Unlock()
				out <- l
				return
			}
			if next == 0 {
				return // ctx or the session ended
			}
			from = next // the watch broke: watch again from where it was
		}
	}()
	return out
}

// watchKeys watches the entry and run keys from revision from until one
// changes (ok), the watch breaks (next: the revision to resume at), or
// ctx or the session ends (next 0).
func (e *entry) watchKeys(ctx context.Context, run string, from int64) (l engine.Loss, next int64, ok bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := e.c.cli.Watch(wctx, e.dir+"/", clientv3.WithPrefix(), clientv3.WithRev(from))
	for {
		select {
		case resp, open := <-wch:
			if !open || resp.Canceled || resp.Err() != nil {
				if ctx.Err() != nil || e.c.base.Err() != nil {
					return l, 0, false
				}
				if resp.CompactRevision > 0 {
					from = resp.CompactRevision
				}
				return l, from, false
			}
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				if k != e.node && k != run {
					continue
				}
				e.mu.Lock()
				ours := e.releasing
				e.mu.Unlock()
				if ours {
					return l, 0, false
				}
				l = engine.Loss{Node: k, Event: engine.LossDeleted, Revision: ev.Kv.ModRevision}
				if ev.Type == clientv3.EventTypePut {
					l.Event = engine.LossChanged
				}
				return l, 0, true
			}
			from = resp.Header.Revision + 1
		case <-ctx.Done():
			return l, 0, false
		case <-e.c.done:
			return l, 0, false
		}
	}
}

// recordStopping records in the folder that this holder lost its standing
// and is stopping, unless someone recorded a hold since; if the whole
// folder went, it puts the record back, so that a newcomer with no memory
// of the holder waits too. It is written before the loss is reported:
// an interferer that deletes the second key once the work reacted to the
// first cannot get ahead of it. Best effort, within a quarter of the
// session timeout.
func (e *entry) recordStopping(ctx context.Context) {
	e.mu.Lock()
	v := e.recRev
	e.mu.Unlock()
	if v == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, e.c.ttl/4)
	defer cancel()
	rec := state.RecordStopping + path.Base(e.node)
	// Over our own record, or into the folder made again if it went (the
	// two branches may both put the record: etcd refuses one branch that
	// puts a key twice).
	resp, err := e.c.cli.Txn(wctx).If(clientv3.Compare(clientv3.ModRevision(e.dir), "=", v)).
		Then(clientv3.OpPut(e.dir, rec)).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.dir), "=", 0)}, []clientv3.Op{clientv3.OpPut(e.dir, rec)}, nil)).
		Commit()
	if err != nil {
		e.c.log.Warn("could not record that the holder is stopping", "lock_dir", e.dir, "err", err)
		return
	}
	ok := resp.Succeeded
	if !ok {
		t := resp.Responses[0].GetResponseTxn()
		ok = t != nil && t.Succeeded
	}
	if ok {
		e.mu.Lock()
		e.recRev = resp.Header.Revision
		e.mu.Unlock()
	}
}

// Retake makes the run record again, marked stopping, after someone else
// deleted it, so that nobody starts while the holder's work is stopped.
func (e *entry) Retake(ctx context.Context, loss engine.Loss) {
	run := runKey(e.dir)
	if loss.Node != run || loss.Event == engine.LossChanged {
		return
	}
	data, _ := json.Marshal(e.runInfo(true))
	resp, err := e.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(run), "=", 0)).
		Then(clientv3.OpPut(run, string(data), clientv3.WithLease(e.c.lease))).Commit()
	if err == nil && resp.Succeeded {
		e.mu.Lock()
		e.runRemade = true
		e.mu.Unlock()
		return
	}
	e.c.log.Warn("could not take the run record back while stopping", "node", run, "err", err)
}

// Release leaves the queue. A holder whose standing is intact deletes its
// entry and run record and records the clean release in one transaction;
// one that lost its standing deletes only what is still its own, and
// records the release only over its own record. A waiter deletes its
// entry. A release whose reply is lost is tried again until it is known
// to have happened, or the session or ctx ends.
func (e *entry) Release(ctx context.Context) error {
	if e.node == "" {
		return nil
	}
	select {
	case <-e.c.done:
		return nil // the entries went with the lease
	default:
	}
	e.mu.Lock()
	e.releasing = true
	intact, recRev := e.standingOK && !e.runRemade, e.recRev
	e.mu.Unlock()
	mine := clientv3.Compare(clientv3.CreateRevision(e.node), "=", e.rev)
	run := runKey(e.dir)
	var txn func() (*clientv3.TxnResponse, error)
	switch {
	case !e.held:
		txn = func() (*clientv3.TxnResponse, error) {
			return e.c.cli.Txn(ctx).If(mine).Then(clientv3.OpDelete(e.node)).Commit()
		}
	case intact:
		rec := state.RecordReleased + path.Base(e.node)
		txn = func() (*clientv3.TxnResponse, error) {
			resp, err := e.c.cli.Txn(ctx).
				If(mine, clientv3.Compare(clientv3.CreateRevision(run), "=", e.runRev)).
				Then(clientv3.OpDelete(e.node), clientv3.OpDelete(run), clientv3.OpPut(e.dir, rec)).Commit()
			if err != nil || resp.Succeeded {
				return resp, err
			}
			return e.releaseWhatIsMine(ctx, recRev)
		}
	default:
		txn = func() (*clientv3.TxnResponse, error) { return e.releaseWhatIsMine(ctx, recRev) }
	}
	for {
		_, err := txn()
		if err == nil {
			return nil
		}
		if err := e.settle(ctx, err); err != nil {
			return err
		}
	}
}

// releaseWhatIsMine records the release over our own record only, and
// deletes the run record if it is ours (attached to our lease) and our
// entry if it is still there.
func (e *entry) releaseWhatIsMine(ctx context.Context, recRev int64) (*clientv3.TxnResponse, error) {
	run := runKey(e.dir)
	var ops []clientv3.Op
	if recRev != 0 {
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(e.dir), "=", recRev)},
			[]clientv3.Op{clientv3.OpPut(e.dir, state.RecordReleased+path.Base(e.node))}, nil))
	}
	ops = append(ops,
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(run), "=", e.c.lease)}, []clientv3.Op{clientv3.OpDelete(run)}, nil),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.node), "=", e.rev)}, []clientv3.Op{clientv3.OpDelete(e.node)}, nil))
	return e.c.cli.Txn(ctx).Then(ops...).Commit()
}
