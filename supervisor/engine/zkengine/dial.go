package zkengine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/engine"
)

// DialOptions say how to reach the members and what the records made
// look like.
type DialOptions struct {
	Servers        []string
	SessionTimeout time.Duration
	Auth           []client.Auth
	TLS            *tls.Config
	// ACL is added to the ACL of every znode the session creates: its
	// authenticated identities get every permission and no one else
	// anything, unless ACL grants it. Without credentials ACL is the
	// whole ACL; nil then means the open ACL, with a warning. See
	// recordACL.
	ACL []wire.ACL
	// AskKind: find out whether the members are coordrun or Apache
	// ZooKeeper (a four-letter word to the first that answers) for Kind.
	AskKind bool
	Log     *slog.Logger
}

// Dial connects a session. A connect that times out is ErrUnreachable,
// with a hint when the members serve TLS and no TLS was given.
func Dial(ctx context.Context, o DialOptions) (*Conn, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := context.WithTimeout(ctx, max(o.SessionTimeout, 10*time.Second))
	c, err := client.Connect(cctx, client.Config{
		Servers:        o.Servers,
		SessionTimeout: o.SessionTimeout,
		// Frequent pings keep the proven lease far ahead of the kill
		// deadline in ordinary operation.
		PingInterval: o.SessionTimeout / 5,
		Auth:         o.Auth,
		TLS:          o.TLS,
		Logger:       log,
	})
	timedOut := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		if timedOut {
			// Not a certificate or auth refusal, which end the connect
			// at once. A plaintext client at TLS ports looks like
			// members that close every connection (as one without a
			// leader does): ask them for a TLS handshake to tell.
			if o.TLS == nil && speaksTLS(ctx, o.Servers) {
				return nil, fmt.Errorf("connect to %s: %w (the members serve TLS: give tls-ca, and tls-cert and tls-key if they want client certificates)", strings.Join(o.Servers, ","), err)
			}
			return nil, fmt.Errorf("connect to %s: %w: %w", strings.Join(o.Servers, ","), engine.ErrUnreachable, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(o.Servers, ","), err)
	}
	kind := "coordrun"
	if o.AskKind && isApacheZooKeeper(ctx, o.Servers, o.TLS) {
		kind = "zookeeper"
	}
	acl, err := lockACL(ctx, o, c, log)
	if err != nil {
		c.Close()
		return nil, err
	}
	return New(c, Options{ACL: acl, Kind: kind, Log: log}), nil
}

// speaksTLS reports whether one of servers answers a TLS handshake: it
// sends its certificate, or refuses ours for want of a client
// certificate (a TLS alert). A ZooKeeper port reads the ClientHello as a
// frame far too long and closes the connection.
func speaksTLS(ctx context.Context, servers []string) bool {
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d := tls.Dialer{Config: &tls.Config{
			// Only whether the port speaks TLS is asked, nothing is
			// sent over it: which certificate it shows does not matter.
			InsecureSkipVerify: true, //nolint:gosec
			MinVersion:         tls.VersionTLS12,
		}}
		c, err := d.DialContext(ctx, "tcp", s)
		cancel()
		var oe *net.OpError
		switch {
		case err == nil:
			c.Close()
			return true
		case errors.As(err, &oe) && oe.Op == "remote error":
			return true
		}
	}
	return false
}

// isApacheZooKeeper asks the first reachable server who it is. An answer
// that does not name coordrun, or none at all, counts as ZooKeeper: the
// cautious side, since it only widens the margin.
func isApacheZooKeeper(ctx context.Context, servers []string, tc *tls.Config) bool {
	for _, s := range servers {
		// As much as a dial and a read of 2s each took before.
		sctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		b, _ := client.FourLetter(sctx, s, "srvr", tc)
		cancel()
		if len(b) == 0 {
			continue
		}
		return !strings.Contains(b, "coordrun")
	}
	return true
}
