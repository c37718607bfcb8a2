package zkengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/internal/testkit/zookeeper"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/enginetest"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
)

// The seam's conformance suite against a coordrun ensemble.
func TestConformanceCoordrun(t *testing.T) {
	enginetest.Run(t, dialer(ensembletest.Start(t, 1).ClientAddr(0)))
}

// The seam's conformance suite against Apache ZooKeeper.
func TestConformanceZooKeeper(t *testing.T) {
	srv, err := zookeeper.Start(zookeeper.Require(t), "coordrun-zkengine-zk-", client.FourLetter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	enginetest.Run(t, dialer(srv.Addr))
}

func dialer(addr string) enginetest.Dial {
	return func(t *testing.T) engine.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := zkengine.Dial(ctx, zkengine.DialOptions{Servers: []string{addr}, SessionTimeout: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}
