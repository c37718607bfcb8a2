package ensemble

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// The member's bounds on what one client can make it hold, and their
// counts. The bounds on what a connection may send or be sent are in
// conn.go and ensemble/zk; this file counts what they refused.

// connectTimeout is how long a new client connection has to send its
// connect request (ZooKeeper: its 10 s sessionless-connection timeout).
// Until then it is no session and proves nothing; all it may cost is a
// socket and a small buffer, for this long.
const connectTimeout = 10 * time.Second

// maxConnectFrame bounds the first frame of a client connection. A
// ConnectRequest is 4+8+4+8 bytes of fixed fields, the password (16 bytes
// from any server that gave it, as ZooKeeper's; 4 for its length) and the
// read-only flag: 45 bytes. The bound leaves room for a password of up to
// 256 bytes; a larger first frame is refused before anything is allocated
// for it, so a connection that has proved nothing holds no more than this.
const maxConnectFrame = 4 + 8 + 4 + 8 + 4 + 256 + 1

// refusalLogInterval is how often a refusal of the same kind for the same
// address is logged at most: a client that hammers the member should not
// be able to flood its log as well.
const refusalLogInterval = time.Minute

// limitStats counts what the member's bounds refused. Safe for concurrent
// use.
type limitStats struct {
	connsRefused   atomic.Int64 // client connections over the per-address cap
	connectRefused atomic.Int64 // first frames larger than a ConnectRequest can be
	repliesRefused atomic.Int64 // replies that would have passed zk.MaxReply
	authBadScheme  atomic.Int64 // auth packets answered AuthFailed: bad scheme
	authTooMany    atomic.Int64 // ... an identity over zk.MaxIdentities
	authTooLong    atomic.Int64 // ... an identity longer than zk.MaxIdentityBytes
	logged         rateLog
}

// authFailed counts an auth packet answered AuthFailed, and logs one over
// a bound.
func (l *limitStats) authFailed(why zk.AuthRefusal, remote string, log *slog.Logger) {
	switch why {
	case zk.AuthTooMany:
		l.authTooMany.Add(1)
		if l.logged.allow("auth-many", remote, time.Now()) {
			log.Warn("client refused: too many identities on one connection", "remote", remote, "max", zk.MaxIdentities)
		}
	case zk.AuthTooLong:
		l.authTooLong.Add(1)
		if l.logged.allow("auth-long", remote, time.Now()) {
			log.Warn("client refused: identity too long", "remote", remote, "max_bytes", zk.MaxIdentityBytes)
		}
	default:
		l.authBadScheme.Add(1)
	}
}

// collectors are the Prometheus view of the counts and of the accept
// loops' states.
func (l *limitStats) collectors(accepts map[string]*acceptState) []prometheus.Collector {
	counter := func(name, help string, v *atomic.Int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v.Load()) })
	}
	const authHelp = "Auth packets answered AuthFailed, by reason."
	cs := []prometheus.Collector{
		counter("coordrun_client_connections_refused_total",
			"Client connections closed at once: their address had --max-client-conns open already.", &l.connsRefused, nil),
		counter("coordrun_client_connect_frames_refused_total",
			"Client connections closed because their first frame was larger than a connect request can be.", &l.connectRefused, nil),
		counter("coordrun_client_replies_refused_total",
			"Read replies answered MARSHALLINGERROR because they would have passed the reply bound.", &l.repliesRefused, nil),
		counter("coordrun_auth_failures_total", authHelp, &l.authBadScheme, prometheus.Labels{"reason": "scheme"}),
		counter("coordrun_auth_failures_total", authHelp, &l.authTooMany, prometheus.Labels{"reason": "too_many_identities"}),
		counter("coordrun_auth_failures_total", authHelp, &l.authTooLong, prometheus.Labels{"reason": "identity_too_long"}),
	}
	for port, a := range accepts {
		labels := prometheus.Labels{"port": port}
		cs = append(cs,
			counter("coordrun_accept_errors_total", "Failed accepts on a port (each retry counted).", &a.errors, labels),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coordrun_accept_failing",
				Help: "1 while a port's accepts fail and its loop backs off.", ConstLabels: labels},
				func() float64 {
					if a.err(time.Now()) != nil {
						return 1
					}
					return 0
				}))
	}
	return cs
}

// addrLimit caps the open client connections per remote IP, as
// ZooKeeper's maxClientCnxns does. Safe for concurrent use.
type addrLimit struct {
	max int // <= 0: no cap

	mu   sync.Mutex // guards open
	open map[netip.Addr]int
}

func newAddrLimit(max int) *addrLimit {
	return &addrLimit{max: max, open: map[netip.Addr]int{}}
}

// take counts a new connection from addr; false when its address has max
// open already (nothing is counted then). Addresses that are no IP (a
// test's pipe) are not capped.
func (l *addrLimit) take(addr net.Addr) bool {
	ip, ok := addrIP(addr)
	if !ok || l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip] >= l.max {
		return false
	}
	l.open[ip]++
	return true
}

// release uncounts a connection take accepted.
func (l *addrLimit) release(addr net.Addr) {
	ip, ok := addrIP(addr)
	if !ok || l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

func addrIP(addr net.Addr) (netip.Addr, bool) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	return ip.Unmap(), ok
}

// rateLog says whether a message about a key may be logged now: once per
// refusalLogInterval per kind and key. Safe for concurrent use.
type rateLog struct {
	mu   sync.Mutex // guards last
	last map[[2]string]time.Time
}

func (r *rateLog) allow(kind, key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[[2]string]time.Time{}
	}
	k := [2]string{kind, key}
	if t, ok := r.last[k]; ok && now.Sub(t) < refusalLogInterval {
		return false
	}
	if len(r.last) >= 4096 {
		// Bounded however many addresses refuse: forget the stale ones,
		// or, if none is stale, all (a few lines more in the log).
		for k, t := range r.last {
			if now.Sub(t) >= refusalLogInterval {
				delete(r.last, k)
			}
		}
		if len(r.last) >= 4096 {
			clear(r.last)
		}
	}
	r.last[k] = now
	return true
}

// selfProbes are the source ports of the member's own ruok probes (Live)
// in flight. The per-address cap does not count them: otherwise clients
// holding loopback's share of connections would make the member look dead
// to its watchdog, which would restart it. Safe for concurrent use.
type selfProbes struct {
	mu    sync.Mutex // guards ports
	ports map[int]struct{}
}

// is reports whether addr is the source of a probe in flight.
func (p *selfProbes) is(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsLoopback() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok = p.ports[ta.Port]
	return ok
}

// dialer dials a probe whose source port is known before it connects
// (the socket is bound in Control, before connect), so that the accept
// loop can never see the connection before it is registered. done
// forgets the port.
func (p *selfProbes) dialer() (d *net.Dialer, done func()) {
	var mine []int // every port bound, one per address tried
	d = &net.Dialer{Control: func(network, _ string, c syscall.RawConn) error {
		var err error
		port := -1
		cerr := c.Control(func(fd uintptr) {
			var sa syscall.Sockaddr = &syscall.SockaddrInet4{}
			if network == "tcp6" {
				sa = &syscall.SockaddrInet6{}
			}
			if err = syscall.Bind(int(fd), sa); err != nil {
				return
			}
			if sa, err = syscall.Getsockname(int(fd)); err != nil {
				return
			}
			switch a := sa.(type) {
			case *syscall.SockaddrInet4:
				port = a.Port
			case *syscall.SockaddrInet6:
				port = a.Port
			}
		})
		if cerr != nil {
			return cerr
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.ports == nil {
			p.ports = map[int]struct{}{}
		}
		p.ports[port] = struct{}{}
		mine = append(mine, port)
		return nil
	}}
	return d, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, port := range mine {
			delete(p.ports, port)
		}
	}
}
