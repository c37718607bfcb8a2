package main

// The storm workload of -compare: -sessions sessions of the raw client
// (sessions.go), held by worker processes (workers.go), are opened and closed again, and then, at once, as many
// new sessions each create an ephemeral znode, and a tenth of them are
// dropped without closing (their TCP connections just end). The others are
// held with pings until the dropped ones must have expired. It reports how
// long the storm took to establish, handshakes and creates that failed,
// survivors the ensemble lost, elections meanwhile, the
// ephemerals left at the end (those of the survivors, exactly, on a
// correct server) and the largest member's peak resident memory.

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/go-zookeeper/zk"
)

type stormResult struct {
	System     string  `json:"system"`
	Sessions   int     `json:"sessions"`
	OpenMs     float64 `json:"storm_open_ms"` // every session established and its ephemeral created
	Refused    int     `json:"refused"`       // handshakes or creates that failed
	Killed     int     `json:"killed"`
	Lost       int     `json:"lost"`           // survivors whose connection ended or whose session expired
	Hogs       int     `json:"hogs,omitempty"` // busy loops running meanwhile (-hog)
	Elections  int     `json:"elections"`      // the epoch's rise while it ran
	PingP99Ms  float64 `json:"ping_p99_ms"`    // the survivors' pings, storm to end
	Ephemerals int     `json:"ephemerals_left"`
	Want       int     `json:"ephemerals_want"`
	PeakRSSKiB int64   `json:"peak_rss_kib"` // the largest member's, sampled during the workload
}

const stormPath = "/bench-storm"

func runStorm(ctx context.Context, s *system, pool *workerPool) (stormResult, error) {
	n := pool.n
	res := stormResult{System: s.name, Sessions: n}
	order := s.clientOrder()
	admin, err := connect(ctx, order[0])
	if err != nil {
		return res, err
	}
	defer admin.Close()
	if _, err := admin.Create(stormPath, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		return res, err
	}
	watch := watchEnsemble(ctx, s)
	defer watch.stop()

	// The sessions that are closed first.
	if _, err := pool.open(ctx, order, 64, ""); err != nil {
		return res, err
	}
	if _, err := pool.step(ctx, workerCmd{Op: "close"}); err != nil {
		return res, err
	}

	// The storm: as many at once, each with an ephemeral.
	start := time.Now()
	opened, err := pool.open(ctx, order, 1024, stormPath)
	res.OpenMs = ms(time.Since(start))
	res.Refused = opened.Refused
	if err != nil {
		return res, err
	}
	defer pool.step(context.WithoutCancel(ctx), workerCmd{Op: "close"}) //nolint:errcheck // best effort: the next workload opens afresh

	// A tenth dropped; the rest held until those must have expired.
	killed, err := pool.step(ctx, workerCmd{Op: "kill", KillEvery: 10})
	if err != nil {
		return res, err
	}
	res.Killed = killed.Killed
	res.Want = n - res.Killed - res.Refused
	if !sleepUntil(ctx, time.Now().Add(rawSessionTimeout+4*time.Second)) {
		return res, ctx.Err()
	}
	stats, err := pool.step(ctx, workerCmd{Op: "stats"})
	if err != nil {
		return res, err
	}
	res.Lost = stats.Lost
	res.PingP99Ms = stats.Pings.percentileMs(0.99)
	// The dropped sessions' ephemerals are gone by now on a correct
	// server; count what is left.
	_, st, err := admin.Exists(stormPath)
	if err != nil {
		return res, err
	}
	res.Ephemerals = int(st.NumChildren)
	res.Elections, res.PeakRSSKiB = watch.stop()
	return res, nil
}

// openMany opens n raw sessions dealt over addrs, inflight handshakes at a
// time; then (when set) runs each session's then. A session whose
// handshake or then failed is nil in the result.
func openMany(ctx context.Context, addrs []string, n, inflight int, then func(int, *rawSession) error) ([]*rawSession, error) {
	sess := make([]*rawSession, n)
	var firstErr atomic.Value
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	for i := range sess {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rs, err := openRawSession(ctx, addrs[i%len(addrs)])
			if err == nil && then != nil {
				if err = then(i, rs); err != nil {
					rs.nc.Close()
				}
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			sess[i] = rs
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return sess, err
}

// countLost counts the sessions whose connection ended or whose ping
// could not be sent.
func countLost(sess []*rawSession) int {
	n := 0
	for _, rs := range sess {
		if rs == nil {
			continue
		}
		select {
		case <-rs.closed:
			n++
			continue
		default:
		}
		if rs.lost.Load() {
			n++
		}
	}
	return n
}

// closeMany closes every session, 64 at a time, each once its server
// closed its end (or after 10 s); it returns how many took longer.
func closeMany(sess []*rawSession) int {
	var late atomic.Int64
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, rs := range sess {
		if rs == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if rs.send(int32(i+2), wire.OpCloseSession) == nil {
				select {
				case <-rs.closed:
				case <-time.After(10 * time.Second):
					late.Add(1)
				}
			}
			rs.nc.Close()
		}()
	}
	wg.Wait()
	return int(late.Load())
}

// keepAlive pings rs every third of its timeout until ctx ends or a ping
// cannot be sent.
func keepAlive(ctx context.Context, rs *rawSession) {
	tick := time.NewTicker(rawSessionTimeout / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rs.closed:
			return
		case <-tick.C:
		}
		if err := rs.ping(); err != nil {
			rs.lost.Store(true)
			return
		}
	}
}

// ensembleWatch samples, every 250 ms, the ensemble's election epoch
// (coordrun's raft term, ZooKeeper's zxid epoch) and each member's
// resident memory, until stopped.
type ensembleWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	first  int64
	last   int64
	peak   int64
	once   sync.Once
}

func watchEnsemble(ctx context.Context, s *system) *ensembleWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ensembleWatch{cancel: cancel, done: make(chan struct{}), first: -1}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, m := range s.members {
				if rss, _, err := memory(m.proc.pid()); err == nil {
					w.peak = max(w.peak, rss)
				}
				if e, ok := epoch(m); ok {
					if w.first < 0 {
						w.first = e
					}
					w.last = max(w.last, e)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the elections seen (the epoch's
// rise) and the peak RSS.
func (w *ensembleWatch) stop() (elections int, peakKiB int64) {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
	if w.first < 0 {
		return 0, w.peak
	}
	return int(w.last - w.first), w.peak
}

// epoch is the election epoch a member reports: coordrun's raft term from
// its metrics, ZooKeeper's zxid epoch (the zxid's high 32 bits) from srvr.
func epoch(m *member) (int64, bool) {
	if m.adminAddr != "" {
		resp, err := metricsHTTP.Get("http://" + m.adminAddr + "/metrics")
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "coordrun_raft_term "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return int64(f), err == nil
			}
		}
		return 0, false
	}
	out, err := fourLetter(m.clientAddr, "srvr")
	if err != nil {
		return 0, false
	}
	z, err := strconv.ParseInt(strings.TrimPrefix(field(out, "Zxid"), "0x"), 16, 64)
	return z >> 32, err == nil
}
