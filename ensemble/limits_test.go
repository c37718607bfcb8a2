package ensemble

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/hashicorp/raft"
)

// dialFrom opens a TCP connection to addr from the loopback address src
// (127.0.0.0/8 is all loopback on Linux, so each is another client host).
func dialFrom(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// closedWithin reports whether the server closes nc within d, reading
// and discarding what it sends first.
func closedWithin(nc net.Conn, d time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	return !(err != nil && errors.As(err, &ne) && ne.Timeout())
}

// handshakeOn sends a new-session connect on nc and reports whether a
// session came back.
func handshakeOn(t testing.TB, nc net.Conn) bool {
	t.Helper()
	if _, err := nc.Write(encodeFrame(&wire.ConnectRequest{Timeout: 4000, Passwd: make([]byte, 16)})); err != nil {
		return false
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer nc.SetReadDeadline(time.Time{})
	frame, err := wire.ReadFrame(bufio.NewReader(nc), nil, 1<<10)
	if err != nil {
		return false
	}
	var resp wire.ConnectResponse
	return resp.Decode(wire.NewDecoder(frame)) == nil && resp.SessionID != 0
}

// An address holds at most MaxClientConns connections; one more is closed
// at once and counted, other addresses are not affected, and a closed
// connection frees its place.
func TestClientConnsPerAddress(t *testing.T) {
	const max = 3
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.MaxClientConns = max
		cfg.FourLetterWords = []string{"conf", "ruok"}
		cfg.AdminAddr = "127.0.0.1:0"
	})
	m := c.waitLeader()
	addr := c.cfgs[0].ClientAddr
	if got := fourLetter(t, addr, "conf"); !containsLine(got, fmt.Sprintf("maxClientCnxns=%d", max)) {
		t.Errorf("conf does not show the cap:\n%s", got)
	}
	testkit.WaitFor(t, 5*time.Second, "conf's connection to be uncounted", func() bool {
		m.perAddr.mu.Lock()
		defer m.perAddr.mu.Unlock()
		return len(m.perAddr.open) == 0
	})
	var held []net.Conn
	for range max {
		nc := dialFrom(t, "127.0.0.1", addr)
		if !handshakeOn(t, nc) {
			t.Fatal("a connection under the cap got no session")
		}
		held = append(held, nc)
	}
	over := dialFrom(t, "127.0.0.1", addr)
	if !closedWithin(over, 5*time.Second) {
		t.Fatalf("connection %d from one address was kept", max+1)
	}
	// The member's own liveness probe comes from loopback too, and is
	// not refused: a full share must not make the watchdog restart it.
	if err := m.Live(testkit.Context(t, 5*time.Second)); err != nil {
		t.Errorf("Live with loopback at its cap: %v", err)
	}
	if n := len(m.probes.ports); n != 0 {
		t.Errorf("%d probe ports left registered", n)
	}
	if other := dialFrom(t, "127.0.0.2", addr); !handshakeOn(t, other) {
		t.Fatal("another address was refused")
	}
	if got, _ := scrapeMetrics(t, m).value("coordrun_client_connections_refused_total"); got < 1 {
		t.Errorf("refused connections counted %v", got)
	}
	held[0].Close()
	testkit.WaitFor(t, 10*time.Second, "the freed place to take a new connection", func() bool {
		return handshakeOn(t, dialFrom(t, "127.0.0.1", addr))
	})
}

func containsLine(s, line string) bool {
	for _, l := range splitLines(s) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// A first frame larger than a connect request can be is refused before
// it is read (the old member read it whole, up to the full frame limit);
// a connect with a password of the largest size allowed still gets its
// answer; a connection that sends nothing is closed after the connect
// timeout, and an established session is not.
func TestConnectFrameAndDeadline(t *testing.T) {
	c := startCluster(t, 1, func(cfg *Config) { cfg.connectTimeout = 500 * time.Millisecond })
	m := c.waitLeader()
	addr := c.cfgs[0].ClientAddr

	big := rawDial(t, addr)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1_110_000)
	if _, err := big.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	// Closed without waiting for the body (or the connect timeout).
	start := time.Now()
	if !closedWithin(big, 5*time.Second) || time.Since(start) > 400*time.Millisecond {
		t.Fatalf("a 1.1 MB connect frame was not refused at once (%v)", time.Since(start))
	}
	if m.bounds.connectRefused.Load() != 1 {
		t.Errorf("refused connect frames counted %d", m.bounds.connectRefused.Load())
	}

	// The largest password allowed: an unknown session, answered
	// "expired" (not closed unanswered).
	rc, ok := rawHandshake(t, addr, wire.ConnectRequest{SessionID: 77, Timeout: 4000, Passwd: make([]byte, 256)})
	if !ok || rc.resp.SessionID != 0 {
		t.Fatalf("a connect with a 256-byte password: ok %v %+v", ok, rc.resp)
	}

	idle := rawDial(t, addr)
	start = time.Now()
	if !closedWithin(idle, 5*time.Second) {
		t.Fatal("a connection that sent nothing was kept past the connect timeout")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("an idle connection closed after %v, before the connect timeout", d)
	}

	s := rawSession(t, addr, 4*time.Second)
	_ = s.nc.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	if _, err := s.nc.Read(b[:]); err == nil || !isTimeout(err) {
		t.Fatalf("an established session's connection ended: %v", err)
	}
	s.ping()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// One connection's identities are a set with a cap: duplicates do not
// count, and the identity past zk.MaxIdentities is AuthFailed and ends the
// connection. A write carries only the identities its ACL checks need, so
// a 1-byte setData from a connection at the cap is no larger in the log
// than one from a plain connection.
func TestAuthIdentitiesBounded(t *testing.T) {
	c := startCluster(t, 1, func(cfg *Config) { cfg.AdminAddr = "127.0.0.1:0" })
	m := c.waitLeader()
	addr := c.cfgs[0].ClientAddr
	setup := rawSession(t, addr, 4*time.Second)
	if code := setup.call(wire.OpCreate, &wire.CreateRequest{Path: "/amp", ACL: openACL}, nil); code != wire.OK {
		t.Fatalf("create: %v", code)
	}
	// entryBytes is the size of the raft entries a 1-byte setData from
	// rc adds to the leader's log.
	entryBytes := func(rc *rawClient, path string) int {
		t.Helper()
		before := m.raft.LastIndex()
		if code := rc.call(wire.OpSetData, &wire.SetDataRequest{Path: path, Data: []byte("x"), Version: -1}, nil); code != wire.OK {
			t.Fatalf("setData: %v", code)
		}
		n := 0
		for i := before + 1; i <= m.raft.LastIndex(); i++ {
			var l raft.Log
			if err := m.store.GetLog(i, &l); err != nil {
				t.Fatal(err)
			}
			if l.Type == raft.LogCommand {
				n += len(l.Data)
			}
		}
		return n
	}
	plain := entryBytes(setup, "/amp")

	// Duplicates, pipelined: they cost a map lookup each and add nothing.
	dup := rawSession(t, addr, 4*time.Second)
	var last int32
	for range 20_000 {
		last = dup.send(wire.OpAuth, &wire.AuthPacket{Scheme: "digest", Auth: []byte("same:pw")})
	}
	for xid := last - 20_000 + 1; xid <= last; xid++ {
		if h, _, err := dup.recv(xid); err != nil || h.Err != wire.OK {
			t.Fatalf("duplicate auth %d: %v %v", xid, h.Err, err)
		}
	}
	if d := entryBytes(dup, "/amp") - plain; d > 64 {
		t.Errorf("one identity sent 20,000 times made a write's entry %d bytes larger", d)
	}

	// Distinct ones: the connection holds its ip identity, so it takes
	// MaxIdentities-1 more, and is closed at the next.
	many := rawSession(t, addr, 4*time.Second)
	for i := range zk.MaxIdentities - 1 {
		if code := many.call(wire.OpAuth, &wire.AuthPacket{Scheme: "digest", Auth: fmt.Appendf(nil, "user%07d:pw", i)}, nil); code != wire.OK {
			t.Fatalf("auth %d: %v", i, code)
		}
	}
	atCap := entryBytes(many, "/amp")
	if atCap > plain {
		t.Errorf("a 1-byte write at the identity cap is %d bytes in the log, %d from a plain connection", atCap, plain)
	}
	// A node whose ACL names one of them: the entry carries that one.
	user := tree.Identity{Scheme: "digest", ID: zk.DigestID("user0000007:pw")}
	acl := []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: user.Scheme, ID: user.ID}}}
	// A session of its own: setup's may have expired unpinged meanwhile.
	if code := rawSession(t, addr, 4*time.Second).call(wire.OpCreate, &wire.CreateRequest{Path: "/amp7", ACL: acl}, nil); code != wire.OK {
		t.Fatalf("create: %v", code)
	}
	if named := entryBytes(many, "/amp7"); named > plain+len(user.Scheme)+len(user.ID)+8 {
		t.Errorf("a write whose ACL names one identity is %d bytes, %d plain", named, plain)
	}
	maxIDs := zk.MaxIdentities * (zk.MaxIdentityBytes + 16)
	// Pipelined in one write; the member stops reading at the first.
	var burst []byte
	first := many.xid + 1
	for i := range 100_000 {
		many.xid++
		e := wire.NewFrameEncoder(nil)
		(&wire.RequestHeader{Xid: many.xid, Opcode: wire.OpAuth}).Encode(e)
		(&wire.AuthPacket{Scheme: "digest", Auth: fmt.Appendf(nil, "more%07d:pw", i)}).Encode(e)
		burst = append(burst, e.Frame()...)
	}
	go func() { _, _ = many.nc.Write(burst) }() // fails once the member closes
	h, _, err := many.recv(first)
	if err != nil || h.Err != wire.ErrAuthFailed {
		t.Fatalf("auth past the cap: %v %v", h.Err, err)
	}
	expectClosed(t, many.nc, "a connection past the identity cap")
	if got, _ := scrapeMetrics(t, m).value("coordrun_auth_failures_total", "reason", "too_many_identities"); got != 1 {
		t.Errorf("auth failures over the cap counted %v", got)
	}
	t.Logf("setData entry: %d bytes plain, %d with %d identities (the cap)", plain, atCap, zk.MaxIdentities)

	// The tree's view: the txn of that write, from the identities a
	// connection at the cap holds.
	ids := zk.NewIdentities(tree.Identity{Scheme: "ip", ID: "127.0.0.1"})
	for i := 0; ids.Auth(nil, &wire.AuthPacket{Scheme: "digest", Auth: fmt.Appendf(nil, "u%d:pw", i)}) == zk.AuthAccepted; i++ {
	}
	txn := tree.Txn{Kind: tree.TxnOps, Auth: ids.List(), Ops: []tree.Op{{Kind: tree.OpSetData, Path: "/amp", Data: []byte("x"), Version: -1}}}
	b, err := txn.MarshalBinary()
	if err != nil || len(b) > maxIDs {
		t.Errorf("txn at the cap: %d bytes, %v", len(b), err)
	}
}
