package client

import (
	"context"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// GetACL returns a node's ACL and stat.
func (c *Client) GetACL(ctx context.Context, path string) ([]wire.ACL, wire.Stat, error) {
	var resp wire.GetACLResponse
	err := c.do(ctx, wire.OpGetACL, path, &wire.PathRequest{Path: path}, &resp)
	return resp.ACL, resp.Stat, err
}

// SetACL replaces a node's ACL if its aversion is version (-1: any).
func (c *Client) SetACL(ctx context.Context, path string, acl []wire.ACL, version int32) (wire.Stat, error) {
	if err := checkACL(wire.OpSetACL, path, acl); err != nil {
		return wire.Stat{}, err
	}
	var resp wire.StatResponse
	err := c.do(ctx, wire.OpSetACL, path, &wire.SetACLRequest{Path: path, ACL: acl, Version: version}, &resp)
	return resp.Stat, err
}

// WhoAmI lists the identities the server has authenticated the session as
// (ZooKeeper 3.7 and later; older servers answer ErrUnimplemented).
func (c *Client) WhoAmI(ctx context.Context) ([]wire.ClientInfo, error) {
	var resp wire.WhoAmIResponse
	err := c.do(ctx, wire.OpWhoAmI, "", nil, &resp)
	return resp.ClientInfo, err
}
