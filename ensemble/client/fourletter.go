package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// FourLetter sends a four-letter word (ruok, srvr, mntr, coordrun's mbrs
// and snap, ...) to the client port at addr and returns the whole answer:
// the server writes it and closes, as Apache ZooKeeper does. With tc set
// it dials TLS, since a TLS client port takes the words over TLS too; an
// addr with UnixPrefix dials that Unix socket (never TLS).
//
// ctx bounds the dial, the TLS handshake and the read. An answer cut
// short by ctx is returned with the error.
func FourLetter(ctx context.Context, addr, word string, tc *tls.Config) (string, error) {
	var d net.Dialer
	var nc net.Conn
	var err error
	network, dialAddr := splitNetwork(addr)
	if tc != nil && network == "tcp" {
		nc, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, network, dialAddr)
	} else {
		nc, err = d.DialContext(ctx, network, dialAddr)
	}
	if err != nil {
		return "", err
	}
	defer nc.Close()
	// One way for the deadline and a cancellation alike; ctx is done by
	// the time the blocked read or write returns.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(nc, word); err != nil {
		return "", fourLetterError(ctx, addr, word, err)
	}
	b, err := io.ReadAll(nc)
	if err != nil {
		return string(b), fourLetterError(ctx, addr, word, err)
	}
	return string(b), nil
}

func fourLetterError(ctx context.Context, addr, word string, err error) error {
	if ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return fmt.Errorf("%s to %s: %w", word, addr, err)
}
