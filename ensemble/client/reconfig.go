package client

import (
	"context"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Reconfig changes the ensemble's members (ZooKeeper's incremental
// reconfig): joining is "server.<id>=<host>:<port>,...", leaving is
// "<id>,...". It returns the new configuration. Members answer only to
// clients allowed to administer them.
func (c *Client) Reconfig(ctx context.Context, joining, leaving string) ([]byte, error) {
	var resp wire.GetDataResponse
	req := &wire.ReconfigRequest{JoiningServers: joining, LeavingServers: leaving, CurConfigID: -1}
	if err := c.do(ctx, wire.OpReconfig, "/zookeeper/config", req, &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}
