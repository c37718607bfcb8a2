package ensemble

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// resume sends a ConnectRequest for session to addr and returns the
// reply, or ok false when the member closed without one.
func resume(t *testing.T, addr string, session int64) (wire.ConnectResponse, bool) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := wire.ConnectRequest{Timeout: 4000, SessionID: session, Passwd: make([]byte, 16)}
	if _, err := nc.Write(encodeFrame(&req)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	body, err := wire.ReadFrame(bufio.NewReader(nc), nil, 1<<20)
	if err != nil {
		return wire.ConnectResponse{}, false
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(body)); err != nil {
		t.Fatalf("connect response: %v", err)
	}
	return resp, true
}

// A member tells a client its session expired only once it has caught up
// with the leader: a member that cannot reach one may simply not have
// applied the session's creation yet, and "expired" would end a live
// session for good. It closes the connection instead, and the client
// tries another member.
func TestUnknownSessionNeedsTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	c.waitLeader()
	const unknown = 0x7eadbeef00000001
	if resp, ok := resume(t, c.Member(0).ClientAddr(), unknown); !ok || resp.Timeout != 0 {
		t.Fatalf("healthy ensemble, unknown session: reply %+v (got one: %v), want the expired reply", resp, ok)
	}
	lone := c.Leader()
	for i := range c.N() {
		if i != lone {
			c.Stop(i)
		}
	}
	testkit.WaitFor(t, 15*time.Second, "the lone member to give up leading", func() bool { return !c.Member(lone).IsLeader() })
	if resp, ok := resume(t, c.Member(lone).ClientAddr(), unknown); ok {
		t.Fatalf("a member without a leader answered an unknown session with %+v; want the connection closed", resp)
	}
}
