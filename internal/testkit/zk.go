package testkit

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// QuietZK is a go-zookeeper logger that says nothing: its reconnect
// chatter would bury a failing test's own output.
var QuietZK zk.Logger = quietZK{}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// DialZK opens a go-zookeeper session to servers, asking for timeout,
// and waits until it has one. It is closed when the test ends. opts are
// go-zookeeper's options (zk.WithEventCallback, ZKTLS, ...), applied after
// the quiet logger, so they may replace it.
func DialZK(t testing.TB, servers []string, timeout time.Duration, opts ...func(*zk.Conn)) *zk.Conn {
	t.Helper()
	all := append([]func(*zk.Conn){zk.WithLogger(QuietZK)}, opts...)
	// go-zookeeper's option type is unexported: one option applies them all.
	conn, events, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
		for _, o := range all {
			o(c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	// go-zookeeper drops events its channel has no room for, so nobody
	// needs to read the rest.
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-deadline.C:
			t.Fatalf("no go-zookeeper session with %s", strings.Join(servers, ","))
		}
	}
}

// ZKTLS makes go-zookeeper dial TLS with tc.
func ZKTLS(tc *tls.Config) func(*zk.Conn) {
	return zk.WithDialer(func(network, address string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, tc)
	})
}
