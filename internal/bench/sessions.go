package main

// The sessions workload of -compare: many idle sessions on one ensemble,
// opened by a minimal client of raw frames (a go-zookeeper connection
// costs the bench about 3 MB; this one a socket and a goroutine) in worker
// processes (workers.go). The sessions are dealt over the members, held for -sessions-hold with a
// ping every third of their timeout, and then closed all at once. It
// reports how long opening and closing took, how many sessions the
// ensemble dropped while held, and each member's memory while it held
// them.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// sessionsResult is one sessions run.
type sessionsResult struct {
	System     string  `json:"system"`
	Sessions   int     `json:"sessions"`
	OpenMs     float64 `json:"open_ms"`
	Hogs       int     `json:"hogs,omitempty"` // busy loops running meanwhile (-hog)
	Refused    int     `json:"refused"`        // not established
	Dropped    int     `json:"dropped"`        // established, then lost while held
	PingP99Ms  float64 `json:"ping_p99_ms"`    // round trip of the pings while held
	Leaders    int     `json:"leader_changes"` // elections while it ran (the epoch's rise)
	CloseMs    float64 `json:"close_ms"`
	MaxRSSKiB  int64   `json:"max_rss_kib"` // the largest member's, while held
	MaxHWMKiB  int64   `json:"max_hwm_kib"`
	SumRSSKiB  int64   `json:"sum_rss_kib"`
	SessionTTL int     `json:"session_timeout_ms"`
}

// rawSession is one session on its own connection.
type rawSession struct {
	nc      net.Conn
	wmu     sync.Mutex
	timeout time.Duration
	closed  chan struct{} // the reader ended
	lost    atomic.Bool
	// notified, when set before any notification can arrive, is called
	// by the reader for each one.
	notified func()
	// replies gets the header of every reply to a request of xid > 0
	// (dropped when full).
	replies chan wire.ReplyHeader
	// pingAt is when the outstanding ping was sent (unix ns; 0: none);
	// pongs, when set, gets each ping's round trip.
	pingAt atomic.Int64
	pongs  atomic.Pointer[pingLog]
}

// pingLog collects ping round trips from many sessions.
type pingLog struct {
	mu  sync.Mutex // guards rtt
	rtt []time.Duration
}

func (l *pingLog) add(d time.Duration) {
	l.mu.Lock()
	l.rtt = append(l.rtt, d)
	l.mu.Unlock()
}

// p99 is the 99th percentile round trip in ms (0 with none).
func (l *pingLog) p99() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.rtt) == 0 {
		return 0
	}
	slices.Sort(l.rtt)
	return ms(percentile(l.rtt, 0.99))
}

// ping sends a ping, noting when for its round trip.
func (s *rawSession) ping() error {
	s.pingAt.Store(time.Now().UnixNano())
	return s.send(wire.XidPing, wire.OpPing)
}

const rawSessionTimeout = 10 * time.Second

func openRawSession(ctx context.Context, addr string) (*rawSession, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	e := wire.NewFrameEncoder(nil)
	(&wire.ConnectRequest{Timeout: int32(rawSessionTimeout / time.Millisecond), Passwd: make([]byte, 16)}).Encode(e)
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := nc.Write(e.Frame()); err != nil {
		nc.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(nc, 512)
	frame, err := wire.ReadFrame(r, nil, 1<<16)
	if err != nil {
		nc.Close()
		return nil, err
	}
	var resp wire.ConnectResponse
	if err := resp.Decode(wire.NewDecoder(frame)); err != nil || resp.SessionID == 0 {
		nc.Close()
		return nil, fmt.Errorf("connect refused (%v)", err)
	}
	_ = nc.SetDeadline(time.Time{})
	s := &rawSession{nc: nc, timeout: time.Duration(resp.Timeout) * time.Millisecond, closed: make(chan struct{}), replies: make(chan wire.ReplyHeader, 4)}
	go s.read(r)
	return s, nil
}

// read drains replies until the connection ends.
func (s *rawSession) read(r *bufio.Reader) {
	defer close(s.closed)
	var buf []byte
	for {
		f, err := wire.ReadFrame(r, buf, 1<<20)
		if err != nil {
			return
		}
		var h wire.ReplyHeader
		if h.Decode(wire.NewDecoder(f)) == nil {
			switch {
			case h.Xid == wire.XidPing:
				if t, l := s.pingAt.Swap(0), s.pongs.Load(); t != 0 && l != nil {
					l.add(time.Since(time.Unix(0, t)))
				}
			case h.Xid == wire.XidNotification && s.notified != nil:
				s.notified()
			case h.Xid > 0:
				select {
				case s.replies <- h:
				default:
				}
			}
		}
		buf = f[:0]
	}
}

func (s *rawSession) send(xid, op int32) error { return s.sendBody(xid, op, nil) }

// sendBody sends a request whose body body encodes (nil: none).
func (s *rawSession) sendBody(xid, op int32, body func(*wire.Encoder)) error {
	e := wire.NewFrameEncoder(make([]byte, 0, 64))
	(&wire.RequestHeader{Xid: xid, Opcode: op}).Encode(e)
	if body != nil {
		body(e)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := s.nc.Write(e.Frame())
	return err
}

// runSessions holds the pool's sessions idle on s for hold: opened, each
// pinged every third of its timeout, then closed all at once.
func runSessions(ctx context.Context, s *system, pool *workerPool, hold time.Duration) (sessionsResult, error) {
	n := pool.n
	res := sessionsResult{System: s.name, Sessions: n, SessionTTL: int(rawSessionTimeout / time.Millisecond)}
	watch := watchEnsemble(ctx, s)
	defer watch.stop()
	start := time.Now()
	opened, err := pool.open(ctx, s.clientOrder(), 64, "")
	res.OpenMs = ms(time.Since(start))
	res.Refused = opened.Refused
	if err != nil {
		return res, fmt.Errorf("no session established: %w", err)
	}
	if !sleepUntil(ctx, time.Now().Add(hold)) {
		return res, ctx.Err()
	}
	for _, m := range s.members {
		rss, hwm, err := memory(m.proc.pid())
		if err != nil {
			continue
		}
		res.SumRSSKiB += rss
		res.MaxRSSKiB = max(res.MaxRSSKiB, rss)
		res.MaxHWMKiB = max(res.MaxHWMKiB, hwm)
	}
	stats, err := pool.step(ctx, workerCmd{Op: "stats"})
	if err != nil {
		return res, err
	}
	res.Dropped = stats.Lost
	res.PingP99Ms = stats.Pings.percentileMs(0.99)
	res.Leaders, _ = watch.stop()

	// Close them all at once; done when every server has closed its end.
	profiled := profileMembers(ctx, s, n)
	start = time.Now()
	closed, err := pool.step(ctx, workerCmd{Op: "close"})
	res.CloseMs = ms(time.Since(start))
	profiled()
	if err != nil {
		return res, err
	}
	if closed.Unanswered > 0 {
		fmt.Fprintf(os.Stderr, "  %s: %d closeSessions not finished by the server in 10 s\n", s.name, closed.Unanswered)
	}
	return res, nil
}
