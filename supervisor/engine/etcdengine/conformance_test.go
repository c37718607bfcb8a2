package etcdengine

import (
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/enginetest"
)

// The seam's conformance suite, on three etcd members (its folders lie
// outside coordrun's default prefix: the sessions use "/").
func TestEtcdConformance(t *testing.T) {
	c := testkit.StartEtcd(t, 3)
	enginetest.Run(t, func(t *testing.T) engine.Conn {
		conn, err := Dial(testkit.Context(t, 30*time.Second), Config{Endpoints: endpoints(c), Prefix: "/", SessionTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	})
}
