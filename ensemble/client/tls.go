package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// startTLS runs the TLS handshake on a freshly dialed connection, within
// the dial timeout. The server name to verify is Config.TLS.ServerName, or
// else the host of the address dialed, so that one Config serves a list
// of members with one certificate each.
func (cl *Client) startTLS(ctx context.Context, nc net.Conn, server string) (net.Conn, error) {
	cfg := cl.cfg.TLS
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(server); err == nil {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
	}
	hctx, cancel := context.WithTimeout(ctx, cl.cfg.DialTimeout)
	defer cancel()
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", server, err)
	}
	return tc, nil
}

// tlsRefused reports whether err is a TLS failure that retrying will not
// cure: this client rejected the server's certificate, or the server sent
// a TLS alert (it rejected this client's certificate, or the lack of one).
// Connect gives up once every server failed so.
func tlsRefused(err error) bool {
	var cve *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return true
	}
	// crypto/tls reports an alert from the other side as a *net.OpError
	// with this Op; the alert type itself is unexported.
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}
