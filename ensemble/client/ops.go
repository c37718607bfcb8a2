package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// call queues r and waits for its outcome or for ctx. A request whose
// caller gave up stays outstanding (replies are matched in order), but
// arms no watch.
func (c *Client) call(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.out.push(r); err != nil {
		return err
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqGone) {
			return ctx.Err()
		}
		// The reader claimed it first: its outcome is moments away.
		return <-r.done
	}
}

func (c *Client) do(ctx context.Context, op int32, path string, body, resp wire.Record) error {
	return opError(op, path, c.call(ctx, newRequest(ctx, op, path, body, resp)))
}

// watchCall is do for the reads that arm a watch. The channel is returned
// only when the watch was armed.
func (c *Client) watchCall(ctx context.Context, op int32, path string, resp wire.Record) (<-chan Event, error) {
	r := newRequest(ctx, op, path, &wire.PathWatchRequest{Path: path, Watch: true}, resp)
	r.watch = watchData
	if op == wire.OpGetChildren2 {
		r.watch = watchChild
	}
	r.wch = make(chan Event, 1)
	err := c.call(ctx, r)
	if err == nil || (op == wire.OpExists && errors.Is(err, wire.ErrNoNode)) {
		return r.wch, err
	}
	return nil, opError(op, path, err)
}

func checkACL(op int32, path string, acl []wire.ACL) error {
	if len(acl) == 0 {
		// ZooKeeper's Java client refuses this locally too.
		return opError(op, path, fmt.Errorf("empty ACL: %w", wire.ErrInvalidACL))
	}
	return nil
}

// Create creates a node and returns its actual path (which differs from
// path for sequential nodes). flags are wire.Flag* values.
func (c *Client) Create(ctx context.Context, path string, data []byte, flags int32, acl []wire.ACL) (string, error) {
	if err := checkACL(wire.OpCreate, path, acl); err != nil {
		return "", err
	}
	var resp wire.CreateResponse
	err := c.do(ctx, wire.OpCreate, path, &wire.CreateRequest{Path: path, Data: data, ACL: acl, Flags: flags}, &resp)
	return resp.Path, err
}

// Create2 is Create that also returns the new node's Stat.
func (c *Client) Create2(ctx context.Context, path string, data []byte, flags int32, acl []wire.ACL) (string, wire.Stat, error) {
	if err := checkACL(wire.OpCreate2, path, acl); err != nil {
		return "", wire.Stat{}, err
	}
	var resp wire.Create2Response
	err := c.do(ctx, wire.OpCreate2, path, &wire.CreateRequest{Path: path, Data: data, ACL: acl, Flags: flags}, &resp)
	return resp.Path, resp.Stat, err
}

// Delete deletes a node if its version matches (-1 matches any).
func (c *Client) Delete(ctx context.Context, path string, version int32) error {
	return c.do(ctx, wire.OpDelete, path, &wire.DeleteRequest{Path: path, Version: version}, nil)
}

// Exists reports whether the node exists, with its Stat if it does.
func (c *Client) Exists(ctx context.Context, path string) (wire.Stat, bool, error) {
	var resp wire.StatResponse
	err := c.do(ctx, wire.OpExists, path, &wire.PathWatchRequest{Path: path}, &resp)
	if errors.Is(err, wire.ErrNoNode) {
		return wire.Stat{}, false, nil
	}
	return resp.Stat, err == nil, err
}

// ExistsW is Exists that also arms a watch: on the node's data and
// deletion if it exists, on its creation if it does not.
func (c *Client) ExistsW(ctx context.Context, path string) (wire.Stat, bool, <-chan Event, error) {
	var resp wire.StatResponse
	ch, err := c.watchCall(ctx, wire.OpExists, path, &resp)
	if errors.Is(err, wire.ErrNoNode) {
		return wire.Stat{}, false, ch, nil
	}
	return resp.Stat, err == nil, ch, err
}

// Get returns a node's data and Stat.
func (c *Client) Get(ctx context.Context, path string) ([]byte, wire.Stat, error) {
	var resp wire.GetDataResponse
	err := c.do(ctx, wire.OpGetData, path, &wire.PathWatchRequest{Path: path}, &resp)
	return resp.Data, resp.Stat, err
}

// GetW is Get that also arms a watch on the node's data and deletion.
func (c *Client) GetW(ctx context.Context, path string) ([]byte, wire.Stat, <-chan Event, error) {
	var resp wire.GetDataResponse
	ch, err := c.watchCall(ctx, wire.OpGetData, path, &resp)
	return resp.Data, resp.Stat, ch, err
}

// Set replaces a node's data if its version matches (-1 matches any).
func (c *Client) Set(ctx context.Context, path string, data []byte, version int32) (wire.Stat, error) {
	var resp wire.StatResponse
	err := c.do(ctx, wire.OpSetData, path, &wire.SetDataRequest{Path: path, Data: data, Version: version}, &resp)
	return resp.Stat, err
}

// Children returns the names of a node's children and its Stat
// (getChildren2).
func (c *Client) Children(ctx context.Context, path string) ([]string, wire.Stat, error) {
	var resp wire.GetChildren2Response
	err := c.do(ctx, wire.OpGetChildren2, path, &wire.PathWatchRequest{Path: path}, &resp)
	return resp.Children, resp.Stat, err
}

// ChildrenW is Children that also arms a watch on the child list and the
// node's deletion.
func (c *Client) ChildrenW(ctx context.Context, path string) ([]string, wire.Stat, <-chan Event, error) {
	var resp wire.GetChildren2Response
	ch, err := c.watchCall(ctx, wire.OpGetChildren2, path, &resp)
	return resp.Children, resp.Stat, ch, err
}

// Sync makes the member this client is connected to catch up with the
// leader before it answers, so that reads issued after Sync returns see
// every write committed before Sync was sent.
func (c *Client) Sync(ctx context.Context, path string) error {
	var resp wire.SyncResponse
	return c.do(ctx, wire.OpSync, path, &wire.PathRequest{Path: path}, &resp)
}

// Multi applies ops atomically. On failure it returns the results (every
// op then has Type wire.OpError, the failing one with its code) and the
// first failing op's error.
func (c *Client) Multi(ctx context.Context, ops ...wire.MultiOp) ([]wire.MultiResult, error) {
	if len(ops) == 0 {
		// As the Java client: an empty transaction is not sent.
		return nil, nil
	}
	var resp wire.MultiResponse
	if err := c.do(ctx, wire.OpMulti, "", &wire.MultiRequest{Ops: ops}, &resp); err != nil {
		return nil, err
	}
	for i, res := range resp.Results {
		if res.Err != wire.OK {
			path := ""
			if i < len(ops) {
				path = ops[i].Path
			}
			return resp.Results, fmt.Errorf("multi op %d (%s %s): %w", i, wire.OpName(opType(ops, i)), path, res.Err)
		}
	}
	return resp.Results, nil
}

func opType(ops []wire.MultiOp, i int) int32 {
	if i < len(ops) {
		return ops[i].Type
	}
	return wire.OpError
}

// AddAuth adds a credential to the session's connection and, once the
// server accepts it, to every later connection. ZooKeeper answers a
// rejected credential with ErrAuthFailed and drops the connection; the
// client then reconnects without it.
func (c *Client) AddAuth(ctx context.Context, scheme string, secret []byte) error {
	a := Auth{Scheme: scheme, Secret: append([]byte(nil), secret...)}
	r := newRequest(ctx, wire.OpAuth, scheme, &wire.AuthPacket{Scheme: scheme, Auth: a.Secret}, nil)
	r.xid = wire.XidAuth
	r.auth = &a
	return opError(wire.OpAuth, scheme, c.call(ctx, r))
}
