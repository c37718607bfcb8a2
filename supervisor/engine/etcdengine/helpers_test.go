package etcdengine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/state"
)

// endpoints is the cluster's members as host:port.
func endpoints(c *testkit.EtcdCluster) []string {
	var eps []string
	for _, u := range c.Endpoints() {
		eps = append(eps, strings.TrimPrefix(u, "http://"))
	}
	return eps
}

// dial opens a session on c with the given lease TTL, closed when the
// test ends.
func dial(t testing.TB, c *testkit.EtcdCluster, ttl time.Duration) *Conn {
	t.Helper()
	conn, err := Dial(testkit.Context(t, 30*time.Second), Config{Endpoints: endpoints(c), SessionTimeout: ttl, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func holder(name string, ttl time.Duration) state.HolderInfo {
	return state.HolderInfo{Host: "test", Command: name, Since: time.Now().UTC(), SessionTimeoutMS: ttl.Milliseconds(), KillGraceMS: 200}
}

func ctxT(t testing.TB) context.Context { return testkit.Context(t, 60*time.Second) }
