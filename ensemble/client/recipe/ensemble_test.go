package recipe_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
)

// startMember starts a one-member in-process ensemble for t and returns
// its client address.
func startMember(t *testing.T) string {
	t.Helper()
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pl.Close()
		t.Fatal(err)
	}
	m, err := ensemble.Start(ensemble.Config{
		ID:                "1",
		DataDir:           t.TempDir(),
		PeerListener:      pl,
		ClientListener:    cl,
		ClientAddr:        cl.Addr().String(),
		Peers:             []ensemble.Peer{{ID: "1", Addr: pl.Addr().String()}},
		MinSessionTimeout: 500 * time.Millisecond,
		HeartbeatTimeout:  time.Second,
		ElectionTimeout:   time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	addr := cl.Addr().String()
	// Ready once a session can sync: the member leads and serves.
	c := connect(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for c.Sync(ctx, "/") != nil {
		if ctx.Err() != nil {
			t.Fatalf("member on %s never served a sync", addr)
		}
	}
	return addr
}

// connect opens a session on addr, closed at the end of t.
func connect(t *testing.T, addr string, auth ...client.Auth) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Config{Servers: []string{addr}, SessionTimeout: 4 * time.Second, Auth: auth})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx bounds one test's calls.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for ch at most d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing after %v", what, d)
	}
	var zero T
	return zero
}
