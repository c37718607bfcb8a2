package client

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// wordServer answers each connection's four-letter word with answer
// (the word itself after a colon) and closes, as a ZooKeeper server does.
func wordServer(t *testing.T, tc *tls.Config) string {
	srv := newFakeServer(t, func(c net.Conn) {
		if tc != nil {
			c = tls.Server(c, tc)
		}
		word := make([]byte, 4)
		if _, err := io.ReadFull(c, word); err != nil {
			return
		}
		_, _ = c.Write([]byte("answer:" + string(word)))
	})
	return srv.Addr()
}

func TestFourLetter(t *testing.T) {
	ctx := testkit.Context(t, 10*time.Second)
	if out, err := FourLetter(ctx, wordServer(t, nil), "srvr", nil); err != nil || out != "answer:srvr" {
		t.Errorf("plaintext: %q, %v", out, err)
	}

	ca := testkit.NewCA(t, "four-letter CA")
	addr := wordServer(t, &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("server"))}})
	if out, err := FourLetter(ctx, addr, "mntr", ca.ClientTLS()); err != nil || out != "answer:mntr" {
		t.Errorf("TLS: %q, %v", out, err)
	}
	if out, err := FourLetter(ctx, addr, "mntr", &tls.Config{RootCAs: testkit.NewCA(t, "other CA").Pool}); err == nil {
		t.Errorf("TLS with a server of another CA: %q, no error", out)
	}
}

// A server that never answers costs the caller its context, no more.
func TestFourLetterSilentServer(t *testing.T) {
	srv := newFakeServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := FourLetter(ctx, srv.Addr(), "ruok", nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent server: %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("silent server: gave up after %v", took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := FourLetter(ctx, srv.Addr(), "ruok", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}
