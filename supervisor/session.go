package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// session is a connected client with what every run on it needs: the
// margin taken off each lease before it becomes a kill deadline, and the
// ACL of the nodes it creates.
type session struct {
	c      *client.Client
	margin time.Duration
	acl    []wire.ACL
}

// dial connects to the ensemble of o and checks the granted timing.
func dial(ctx context.Context, o Options) (*session, error) {
	cctx, cancel := context.WithTimeout(ctx, max(o.SessionTimeout, 10*time.Second))
	c, err := client.Connect(cctx, client.Config{
		Servers:        o.Servers,
		SessionTimeout: o.SessionTimeout,
		// Frequent pings keep the proven lease far ahead of the kill
		// deadline in ordinary operation.
		PingInterval: o.SessionTimeout / 5,
		Auth:         o.Auth,
		TLS:          o.TLS,
		Logger:       o.Log,
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(o.Servers, ","), err)
	}
	margin, err := leaseMargin(o, c)
	if err != nil {
		c.Close()
		return nil, err
	}
	acl, err := lockACL(ctx, o, c)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &session{c: c, margin: margin, acl: acl}, nil
}

// leaseMargin is what is taken off every lease before it becomes the
// job's kill deadline: the drift margin, widened against Apache ZooKeeper.
// It checks the timing again with the timeout the server granted (which
// may be below the one asked for) and the final margin: the kill must not
// fire between two ordinary pings.
func leaseMargin(o Options, c *client.Client) (time.Duration, error) {
	margin := o.DriftMargin
	if o.ExtraMargin > 0 && isApacheZooKeeper(o.Servers, o.TLS) {
		margin += o.ExtraMargin
		o.Log.Debug("ensemble is Apache ZooKeeper; widening the lease margin", "margin", margin)
	}
	timeout := c.SessionTimeout()
	if budget := timeout / 2; o.KillGrace+margin+killSlack > budget {
		return 0, UsageError{fmt.Errorf("session timeout %v (as granted by the ensemble) is too short for --kill-grace %v and a lease margin of %v: they must stay under %v; raise --session-timeout or lower --kill-grace", timeout, o.KillGrace, margin, budget)}
	}
	return margin, nil
}
