package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
)

// The supervisor's budget (see minStall): a 6s session, pings every
// timeout/5, and the job's TERM when the lease has 2.35s left (drift
// margin 250ms, kill grace 2s, slack 100ms). A failover passes when the
// lease never got that close to the clock.
const (
	budgetTimeout = 6 * time.Second
	budgetPing    = budgetTimeout / 5
	killMargin    = 2350 * time.Millisecond
)

type proofAt struct {
	sent, lease time.Time
	at          time.Time // when the proof was made
}

// leaseLog records every lease proof of a client.
type leaseLog struct {
	mu     sync.Mutex
	proofs []proofAt
}

func (l *leaseLog) hooks() *testHooks {
	return &testHooks{onProof: func(sent time.Time, _ time.Duration, lease time.Time) {
		l.mu.Lock()
		l.proofs = append(l.proofs, proofAt{sent: sent, lease: lease, at: time.Now()})
		l.mu.Unlock()
	}}
}

func (l *leaseLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.proofs)
}

// firstSentAfter is the first proof of a packet sent at or after t.
func (l *leaseLog) firstSentAfter(t time.Time) (proofAt, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proofs {
		if !p.sent.Before(t) {
			return p, true
		}
	}
	return proofAt{}, false
}

// minHeadroom is the least the lease was ahead of the clock between from
// and now. The lease only grows, in steps, and the clock runs on, so the
// least is found just before a proof or now.
func (l *leaseLog) minHeadroom(from, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lease time.Time
	least := time.Duration(1<<63 - 1)
	for _, p := range l.proofs {
		if p.at.After(from) && !lease.IsZero() {
			least = min(least, lease.Sub(p.at))
		}
		lease = p.lease
	}
	return min(least, lease.Sub(now))
}

// minRoundTrip is the shortest time from a packet's send to its proof.
func (l *leaseLog) minRoundTrip() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	least := time.Duration(1<<63 - 1)
	for _, p := range l.proofs {
		least = min(least, p.at.Sub(p.sent))
	}
	return least
}

// proxied starts three members with a proxy in front of each; clients
// know the members by their proxies' addresses.
func proxied(t *testing.T) (*ensembletest.Cluster, []*testkit.Proxy, []string) {
	cl := ensembletest.Start(t, 3)
	var ps []*testkit.Proxy
	var addrs []string
	for _, s := range cl.Servers() {
		p := testkit.StartProxy(t, s)
		ps, addrs = append(ps, p), append(addrs, p.Addr())
	}
	return cl, ps, addrs
}

// budgetClient connects with the supervisor's session settings.
func budgetClient(t *testing.T, servers []string, log *leaseLog) *Client {
	c := connect(t, servers, budgetTimeout, func(cfg *Config) {
		cfg.PingInterval = budgetPing
		cfg.hooks = log.hooks()
	})
	if c.SessionTimeout() != budgetTimeout {
		t.Fatalf("negotiated %v, want %v", c.SessionTimeout(), budgetTimeout)
	}
	return c
}

type failoverResult struct {
	server   string        // the member that took over
	gaveUp   time.Duration // from the silence to giving up the member
	proven   time.Duration // from the silence to a proof of a packet sent after it
	headroom time.Duration // the least the lease was ahead of the clock
}

// failover silences the proxies given, the first of which the client is
// connected to, and waits until the session is proven on another member.
// With inFlight, the connected member falls silent with the client's next
// packet on its way (the lease is then as old as it gets when the client
// notices); else just after an answer (the client then notices as late as
// it gets). It fails the test unless the lease stayed killMargin ahead of
// the clock throughout, and the member was given up within a ping
// interval and the stall allowance (plus scheduling slack).
func failover(t *testing.T, c *Client, events <-chan StateEvent, log *leaseLog, inFlight bool, silent ...*testkit.Proxy) failoverResult {
	t.Helper()
	n := log.count()
	testkit.WaitFor(t, 10*time.Second, "two more proofs", func() bool { return log.count() >= n+2 })
	from := c.currentServer()
	if inFlight {
		silent[0].SilenceOnNextFrame()
		testkit.WaitFor(t, 10*time.Second, "the next packet", silent[0].Silent)
	}
	silencedAt := time.Now()
	for _, p := range silent {
		p.Silence()
	}
	susp := awaitState(t, events, StateSuspended, 5*time.Second)
	r := failoverResult{gaveUp: time.Since(silencedAt)}
	if !errors.Is(susp.Err, errStalled) || susp.Server != from {
		t.Errorf("suspended from %s because %v; want a stall of %s", susp.Server, susp.Err, from)
	}
	r.server = awaitState(t, events, StateConnected, 5*time.Second).Server
	var proof proofAt
	testkit.WaitFor(t, 5*time.Second, "a proof of a packet sent after the silence", func() bool {
		var ok bool
		proof, ok = log.firstSentAfter(silencedAt)
		return ok
	})
	r.proven = proof.at.Sub(silencedAt)
	r.headroom = log.minHeadroom(silencedAt, time.Now())
	t.Logf("silence of %d member(s) -> given up after %v, connected to %s, new proof after %v; lease at least %v ahead",
		len(silent), r.gaveUp.Round(time.Millisecond), r.server, r.proven.Round(time.Millisecond), r.headroom.Round(time.Millisecond))
	if r.headroom < killMargin {
		t.Errorf("the lease came within %v of the clock; a supervisor kills its job at %v", r.headroom, killMargin)
	}
	const slack = 750 * time.Millisecond // -race on a shared machine
	if limit := budgetPing + budgetTimeout/6 + slack; r.gaveUp > limit {
		t.Errorf("gave up the silent member after %v, want within %v", r.gaveUp, limit)
	}
	// The other silent members each cost the stagger, the answering one a
	// handshake.
	if limit := time.Duration(len(silent)-1)*budgetTimeout/20 + slack; r.proven-r.gaveUp > limit {
		t.Errorf("new proof %v after giving up, want within %v", r.proven-r.gaveUp, limit)
	}
	return r
}

func index(addrs []string, a string) int {
	i := slices.Index(addrs, a)
	if i < 0 {
		panic(a + " is not a proxy")
	}
	return i
}

// The connected member falls silent while the other two answer: the
// client moves, and the lease never gets near the job's kill deadline.
// Four times over, alternately just after an answer and with a packet on
// its way; each silent member comes back before the next round.
func TestFailoverSilentMember(t *testing.T) {
	_, ps, addrs := proxied(t)
	ctx := testkit.Context(t, 60*time.Second)
	var log leaseLog
	c := budgetClient(t, addrs, &log)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	sid := c.SessionID()
	eph, err := c.Create(ctx, fmt.Sprintf("/failover-%x", sid), nil, wire.FlagEphemeral, OpenACL)
	must(t, err)

	for round := 0; round < 4; round++ {
		lost := index(addrs, c.currentServer())
		r := failover(t, c, events, &log, round%2 == 1, ps[lost])
		if r.server == addrs[lost] {
			t.Fatalf("round %d: reconnected to the silent member", round)
		}
		ps[lost].Speak()
	}
	if c.SessionID() != sid || c.State() != StateConnected {
		t.Fatalf("session %x state %v, want %x connected", c.SessionID(), c.State(), sid)
	}
	must(t, c.Sync(ctx, eph))
	if _, ok, err := c.Exists(ctx, eph); !ok || err != nil {
		t.Fatalf("ephemeral after the failovers: %v %v", ok, err)
	}
}

// The connected member and one other fall silent: the third takes over in
// time. Then both come back and the other two fall silent: the member
// silent first is the only one left, and serves the session again.
func TestFailoverTwoSilentMembers(t *testing.T) {
	_, ps, addrs := proxied(t)
	ctx := testkit.Context(t, 60*time.Second)
	var log leaseLog
	c := budgetClient(t, addrs, &log)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	sid := c.SessionID()

	first := index(addrs, c.currentServer())
	// The other silent member is the one the client tries first, so that
	// the stagger is paid.
	second := index(addrs, c.servers[(index(c.servers, addrs[first])+1)%3])
	third := 3 - first - second
	r := failover(t, c, events, &log, true, ps[first], ps[second])
	if r.server != addrs[third] {
		t.Fatalf("connected to %s, want the one member that answers, %s", r.server, addrs[third])
	}
	ps[first].Speak()
	ps[second].Speak()
	if _, err := c.Create(ctx, "/two-silent", nil, 0, OpenACL); err != nil {
		t.Fatal(err)
	}

	r = failover(t, c, events, &log, false, ps[third], ps[second])
	if r.server != addrs[first] {
		t.Fatalf("connected to %s, want the member that came back, %s", r.server, addrs[first])
	}
	if c.SessionID() != sid {
		t.Fatalf("session %x, want %x", c.SessionID(), sid)
	}
	if _, _, err := c.Get(ctx, "/two-silent"); err != nil {
		t.Fatal(err)
	}
}

// A healthy connection is never given up: not while pings and requests
// flow, nor when every answer takes most of the stall allowance.
func TestHealthyConnectionKept(t *testing.T) {
	_, ps, addrs := proxied(t)
	const timeout = budgetTimeout
	allowance := (&conn{timeout: timeout}).stallAllowance(wire.OpPing)
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"prompt", 0}, {"slow", allowance * 6 / 10}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range ps {
				p.Delay(tc.delay)
			}
			ctx := testkit.Context(t, 60*time.Second)
			var log leaseLog
			c := connect(t, addrs, timeout, func(cfg *Config) {
				cfg.PingInterval = timeout / 5
				cfg.hooks = log.hooks()
			})
			events := c.Events()
			awaitState(t, events, StateConnected, time.Second)
			server := c.currentServer()
			root := fmt.Sprintf("/healthy-%x", c.SessionID())
			_, err := c.Create(ctx, root, nil, 0, OpenACL)
			must(t, err)
			start := time.Now()

			// A steady load of writes and reads next to the pings.
			stop := make(chan struct{})
			loadDone := make(chan error, 1)
			go func() {
				pace := time.NewTicker(10 * time.Millisecond)
				defer pace.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						loadDone <- nil
						return
					case <-pace.C:
					}
					if _, err := c.Set(ctx, root, []byte(fmt.Sprint(i)), -1); err != nil {
						loadDone <- err
						return
					}
					if _, _, err := c.Get(ctx, root); err != nil {
						loadDone <- err
						return
					}
				}
			}()
			// Until a packet sent six ping intervals on is answered.
			later := start.Add(6 * timeout / 5)
			testkit.WaitFor(t, 30*time.Second, "six ping intervals", func() bool {
				select {
				case ev := <-events:
					t.Fatalf("state changed: %+v", ev)
				default:
				}
				_, ok := log.firstSentAfter(later)
				return ok
			})
			close(stop)
			if err := <-loadDone; err != nil {
				t.Fatalf("load: %v", err)
			}
			select {
			case ev := <-events:
				t.Fatalf("state changed: %+v", ev)
			default:
			}
			if c.currentServer() != server || c.State() != StateConnected {
				t.Fatalf("on %s (%v), want still on %s", c.currentServer(), c.State(), server)
			}
			if rtt := log.minRoundTrip(); rtt < tc.delay {
				t.Fatalf("quickest answer after %v, the proxy delays by %v", rtt, tc.delay)
			}
			head := log.minHeadroom(start, time.Now())
			t.Logf("%d proofs; answers delayed by %v; lease at least %v ahead", log.count(), tc.delay, head.Round(time.Millisecond))
			if head < timeout/2 {
				t.Fatalf("lease came within %v of the clock", head)
			}
		})
	}
}

// Against Apache ZooKeeper, with two routes to one server standing in for
// two members: the route in use falls silent and the session moves to the
// other in time.
func TestZooKeeperSilentRoute(t *testing.T) {
	addr := zooKeeper.Addr(t)
	routes := []*testkit.Proxy{testkit.StartProxy(t, addr), testkit.StartProxy(t, addr)}
	var log leaseLog
	c := budgetClient(t, []string{routes[0].Addr(), routes[1].Addr()}, &log)
	events := c.Events()
	awaitState(t, events, StateConnected, time.Second)
	lost := 0
	if c.currentServer() == routes[1].Addr() {
		lost = 1
	}
	r := failover(t, c, events, &log, true, routes[lost])
	if r.server != routes[1-lost].Addr() {
		t.Fatalf("connected to %s", r.server)
	}
	if _, _, err := c.Get(testkit.Context(t, 10*time.Second), "/"); err != nil {
		t.Fatal(err)
	}
}
