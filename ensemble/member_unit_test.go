package ensemble

import (
	"crypto/tls"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// A member RPC failure travels as a code: the caller's errors.Is sees the
// sentinel the server failed with, and the text is only for the log. The
// replies of members from before the codes are understood too.
func TestPeerErrorCodes(t *testing.T) {
	for _, sentinel := range []error{errNotLeader, errBadChange, errBadRequest, errUnknownRPC} {
		err := peerErrorOf(rpcError, encodePeerError(errors.Join(sentinel, errors.New("detail"))))
		if !errors.Is(err, sentinel) {
			t.Errorf("%v came back as %v", sentinel, err)
		}
		for _, other := range []error{errNotLeader, errBadChange, errBadRequest, errUnknownRPC} {
			if other != sentinel && errors.Is(err, other) {
				t.Errorf("%v also matches %v", err, other)
			}
		}
	}
	failed := peerErrorOf(rpcError, encodePeerError(errors.New("disk full")))
	var pe *peerError
	if !errors.As(failed, &pe) || pe.code != peerFailed || pe.text != "disk full" || errors.Is(failed, errNotLeader) {
		t.Errorf("plain failure came back as %#v", failed)
	}
	if err := peerErrorOf(rpcError, []byte("not leader")); !errors.As(err, &pe) || pe.code != peerFailed || pe.text != "not leader" {
		t.Errorf("an older member's text reply: %#v", err)
	}
	if err := peerErrorOf(rpcLegacyBadChange, []byte("x is not a member")); !errors.Is(err, errBadChange) {
		t.Errorf("an older member's bad-change reply: %v", err)
	}
	if err := peerErrorOf(rpcStatus, nil); err == nil || errors.Is(err, errNotLeader) {
		t.Errorf("a reply of another kind: %v", err)
	}
}

// silentTLS is an address that accepts TCP connections and never answers
// a TLS handshake, so dialing it takes the whole dial timeout. It counts
// the connections made to it.
func silentTLS(t *testing.T) (string, *atomic.Int32) {
	ln := testkit.Listen(t)
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String(), &n
}

// The pool dials outside its lock: a dial to one address that hangs does
// not hold up a dial to another, and callers of one address share its
// dial.
func TestPeerPoolDialsOutsideLock(t *testing.T) {
	slow, slowDials := silentTLS(t)
	other, _ := silentTLS(t)
	p := &peerPool{tls: &peerTLS{dial: &tls.Config{InsecureSkipVerify: true}}}
	defer p.closeAll()

	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.get(slow); err == nil {
				t.Error("a dial to a silent peer succeeded")
			}
		}()
	}
	// The three dials of slow are under way (or about to be) when this
	// one starts; it takes one dial timeout, not two.
	testkit.WaitFor(t, time.Second, "a dial to the slow peer", func() bool { return slowDials.Load() > 0 })
	if _, err := p.get(other); err == nil {
		t.Error("a dial to a silent peer succeeded")
	}
	otherTook := time.Since(start)
	wg.Wait()
	if otherTook > 3500*time.Millisecond {
		t.Errorf("a dial to another peer waited for the slow one: %v", otherTook)
	}
	if n := slowDials.Load(); n != 1 {
		t.Errorf("%d dials of one address for three callers at once, want 1", n)
	}
}

func TestBroadcast(t *testing.T) {
	var b broadcast
	b.notify() // nobody waits: nothing to do
	ch := b.wait()
	if ch != b.wait() {
		t.Error("two waits before a notify got different channels")
	}
	select {
	case <-ch:
		t.Fatal("closed before notify")
	default:
	}
	b.notify()
	select {
	case <-ch:
	default:
		t.Fatal("not closed by notify")
	}
	select {
	case <-b.wait():
		t.Fatal("a wait after the notify is already closed")
	default:
	}
}

func TestTracker(t *testing.T) {
	var tr tracker
	release := make(chan struct{})
	var ended atomic.Int32
	for range 5 {
		tr.Go(func() {
			<-release
			ended.Add(1)
		})
	}
	waited := make(chan struct{})
	go func() { tr.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while goroutines ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-waited
	if ended.Load() != 5 {
		t.Errorf("Wait returned after %d of 5 goroutines", ended.Load())
	}
	var untracked *tracker
	done := make(chan struct{})
	untracked.Go(func() { close(done) })
	<-done
}

// A configuration error names the field at fault; a missing setting is
// ErrRequired.
func TestConfigErrors(t *testing.T) {
	ln := testkit.Listen(t)
	defer ln.Close()
	for _, c := range []struct {
		cfg      Config
		field    string
		required bool
	}{
		{Config{DataDir: "d", PeerAddr: "p:1"}, "ID", true},
		{Config{ID: "1", PeerAddr: "p:1"}, "DataDir", true},
		{Config{ID: "1", DataDir: "d"}, "PeerAddr", true},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", MinSessionTimeout: time.Minute}, "MinSessionTimeout", false},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", Peers: []Peer{{ID: "2", Addr: "q:1"}}}, "Peers", false},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", Pprof: true}, "Pprof", false},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", ClientIdentity: CertIdentityO}, "ClientIdentity", false},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", PeerTLS: &tls.Config{}}, "PeerTLS", false},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1"}, "InsecurePeers", false},
	} {
		err := c.cfg.setDefaults()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrConfig) || errors.Is(err, ErrRequired) != c.required {
			t.Errorf("%+v: %v, want an error of field %s (required: %v)", c.cfg, err, c.field, c.required)
		}
	}
	cfg := Config{ID: "1", DataDir: "d", PeerListener: ln}
	if err := cfg.setDefaults(); err != nil || cfg.PeerAddr != ln.Addr().String() || cfg.ClientAddr == "" || cfg.MaxDataBytes == 0 {
		t.Errorf("defaults: %v %+v", err, cfg)
	}
	if err := (&Config{}).setDefaults(); err.Error() != "invalid member configuration: member id is required" {
		t.Errorf("message %q", err)
	}
}

// TestSelfAddrs: a wildcard client port is asked on a loopback address by
// number, never by a name that must resolve.
func TestSelfAddrs(t *testing.T) {
	for addr, want := range map[string][]string{
		"0.0.0.0:2181":      {"127.0.0.1:2181"},
		"[::]:2181":         {"127.0.0.1:2181", "[::1]:2181"},
		"127.0.0.1:2181":    {"127.0.0.1:2181"},
		"10.1.2.3:2181":     {"10.1.2.3:2181"},
		"[fe80::1]:2181":    {"[fe80::1]:2181"},
		"zk.example.com:21": {"zk.example.com:21"},
	} {
		if got := selfAddrs(addr); !slices.Equal(got, want) {
			t.Errorf("selfAddrs(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestLiveOnWildcardPort: a member listening on every address answers its
// own liveness check.
func TestLiveOnWildcardPort(t *testing.T) {
	m, err := Start(Config{ID: "1", DataDir: t.TempDir(), ClientAddr: ":0", PeerAddr: "127.0.0.1:0", Logger: testkit.Logger("wild"),
		HeartbeatTimeout: testkit.HeartbeatTimeout, ElectionTimeout: testkit.ElectionTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.ruok(testkit.Context(t, 5*time.Second)); err != nil {
		t.Fatalf("ruok on %s: %v", m.ClientAddr(), err)
	}
}

// The status page's roots default to the supervisor's and must be
// absolute znode paths.
func TestConfigStatusRoots(t *testing.T) {
	cfg := Config{ID: "1", DataDir: "d", PeerAddr: "127.0.0.1:1"}
	if err := cfg.setDefaults(); err != nil || cfg.StatusLockRoot != "/coordrun/locks" || cfg.StatusCronRoot != "/coordrun/cron" {
		t.Errorf("defaults: %v, %q %q", err, cfg.StatusLockRoot, cfg.StatusCronRoot)
	}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", StatusLockRoot: "locks"}, "StatusLockRoot"},
		{Config{ID: "1", DataDir: "d", PeerAddr: "p:1", StatusCronRoot: "/cron/"}, "StatusCronRoot"},
	} {
		var ce *ConfigError
		if err := c.cfg.setDefaults(); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: %v, want an error of that field", c.field, err)
		}
	}
}
