package main

// Recovery workloads of -compare, for every system of member processes:
//
//   - failover: a client writes through a follower, starting a write every
//     failoverTick whether or not the earlier ones have answered (so that
//     a request stuck on the dead leader does not hide when writes work
//     again); the harness SIGKILLs the leader ("leader killed"), or sends
//     it SIGTERM ("leader stopped": a graceful stop, where coordrun hands
//     leadership over), and times until the first write issued after the
//     signal succeeds. ZooKeeper-wire clients whose
//     connection breaks open a fresh session on the same member at once
//     (go-zookeeper's own reconnect waits a second between rounds). The
//     killed member is restarted on its data dir and the ensemble waited
//     for between repeats.
//   - startup: a fresh 3-member ensemble on new data dirs, timed from just
//     before the first member is started until a write succeeds through a
//     fresh session (or client) per attempt.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

const failoverTick = 5 * time.Millisecond

// recoveryResult is a repeated recovery measurement of one system.
type recoveryResult struct {
	System    string    `json:"system"`
	Signal    string    `json:"signal,omitempty"` // failover: SIGKILL or SIGTERM
	SamplesMs []float64 `json:"samples_ms"`
	MedianMs  float64   `json:"median_ms"`
}

func (r *recoveryResult) add(d time.Duration) {
	r.SamplesMs = append(r.SamplesMs, ms(d))
	s := slices.Clone(r.SamplesMs)
	slices.Sort(s)
	r.MedianMs = s[(len(s)-1)/2]
}

// zkSession opens a session on addr with a single connection attempt;
// go-zookeeper would wait a second before its second attempt.
func zkSession(ctx context.Context, addr string, limit time.Duration) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*zk.Conn, error) {
		go c.Close() // may wait a second for a closeSession reply
		return nil, err
	}
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	connecting := 0
	for {
		select {
		case ev := <-events:
			switch ev.State {
			case zk.StateHasSession:
				return c, nil
			case zk.StateConnecting:
				if connecting++; connecting > 1 {
					return fail(errors.New("connection attempt failed"))
				}
			case zk.StateConnected:
			default:
				return fail(fmt.Errorf("session: %v", ev.State))
			}
		case <-timeout.C:
			return fail(fmt.Errorf("no session with %s after %v", addr, limit))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
}

// zkWriter writes one znode through one member, replacing its session
// whenever a write fails. It is safe for concurrent use.
type zkWriter struct {
	addr  string
	path  string
	value []byte
	seq   bool // create a sequential node under path instead of setting path
	mu    sync.Mutex
	conn  *zk.Conn
	dial  bool // a session is being opened
}

func (w *zkWriter) write(ctx context.Context) error {
	w.mu.Lock()
	c := w.conn
	if c == nil {
		if w.dial {
			w.mu.Unlock()
			return errors.New("reconnecting")
		}
		w.dial = true
		w.mu.Unlock()
		nc, err := zkSession(ctx, w.addr, 5*time.Second)
		w.mu.Lock()
		w.dial, w.conn, c = false, nc, nc
		w.mu.Unlock()
		if err != nil {
			return err
		}
	} else {
		w.mu.Unlock()
	}
	var err error
	if w.seq {
		_, err = c.Create(w.path, w.value, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	} else {
		_, err = c.Set(w.path, w.value, -1)
	}
	if err != nil {
		w.mu.Lock()
		if w.conn == c {
			w.conn = nil
			go c.Close()
		}
		w.mu.Unlock()
	}
	return err
}

func (w *zkWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// writer is what the recovery workloads write through.
type writer interface {
	write(ctx context.Context) error
	close()
}

// recoveryOps is what the recovery workloads need of a system kind.
type recoveryOps struct {
	// writer writes through the member at addr; fresh: into an empty
	// ensemble.
	writer func(ctx context.Context, addr string, fresh bool) (writer, error)
	// wait waits until every member serves, and refreshes the roles.
	wait func(ctx context.Context, s *system) error
	// launch starts a fresh ensemble in dir without waiting.
	launch func(dir string) (*system, error)
}

// runFailover ends s's leader with sig repeats times.
func runFailover(ctx context.Context, s *system, ops recoveryOps, repeats int, sig syscall.Signal) (recoveryResult, error) {
	res := recoveryResult{System: s.name, Signal: signalName(sig)}
	for k := 0; k < repeats; k++ {
		if err := ops.wait(ctx, s); err != nil {
			return res, err
		}
		var leader, follower *member
		for _, m := range s.members {
			if m.role == "leader" {
				leader = m
			} else if follower == nil {
				follower = m
			}
		}
		if leader == nil || follower == nil {
			return res, fmt.Errorf("%s: no leader and follower to fail over", s.name)
		}
		d, err := failoverOnce(ctx, s, ops, leader, follower, sig)
		if err != nil {
			return res, fmt.Errorf("%s failover %d: %w", s.name, k+1, err)
		}
		res.add(d)
		p, err := leader.proc.restart()
		if err != nil {
			return res, err
		}
		leader.proc = p
	}
	return res, ops.wait(ctx, s)
}

func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return "SIGKILL"
}

func failoverOnce(ctx context.Context, s *system, ops recoveryOps, leader, follower *member, sig syscall.Signal) (time.Duration, error) {
	w, err := ops.writer(ctx, follower.clientAddr, false)
	if err != nil {
		return 0, err
	}
	defer w.close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var killedAt atomic.Int64 // unix ns; 0 before the kill
	var okBefore atomic.Int64
	var lastErr atomic.Value // string: errors differ in type
	first := make(chan time.Time, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 256)
	go func() {
		tick := time.NewTicker(failoverTick)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // too many writes hang; wait for some
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				t0 := time.Now().UnixNano()
				actx, acancel := context.WithTimeout(wctx, 10*time.Second)
				err := w.write(actx)
				acancel()
				done := time.Now()
				if err != nil {
					lastErr.Store(err.Error())
					return
				}
				if k := killedAt.Load(); k == 0 {
					okBefore.Add(1)
				} else if t0 >= k {
					select {
					case first <- done:
					default:
					}
				}
			}()
		}
	}()
	if err := poll(ctx, 20*time.Second, 10*time.Millisecond, "writes through "+follower.clientAddr, func() (bool, error) {
		return okBefore.Load() >= 20, nil
	}); err != nil {
		return 0, fmt.Errorf("%w (last error: %v)", err, lastErr.Load())
	}
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	if err := syscall.Kill(-leader.proc.pid(), sig); err != nil {
		return 0, err
	}
	select {
	case t := <-first:
		cancel()
		<-leader.proc.done
		return t.Sub(killed), nil
	case <-time.After(60 * time.Second):
		return 0, fmt.Errorf("no write succeeded within 60s of the leader's %s (last error: %v)", signalName(sig), lastErr.Load())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// runStartup starts repeats fresh ensembles under dir, one at a time.
func runStartup(ctx context.Context, name, dir string, ops recoveryOps, repeats int) (recoveryResult, error) {
	res := recoveryResult{System: name}
	for k := 0; k < repeats; k++ {
		d := filepath.Join(dir, fmt.Sprintf("startup-%s-%d", name, k))
		t0 := time.Now()
		s, err := ops.launch(d)
		stop := func() {
			if s != nil {
				for _, m := range s.members {
					m.proc.stop(10 * time.Second)
				}
			}
			os.RemoveAll(d)
		}
		if err != nil {
			stop()
			return res, err
		}
		var w writer
		err = poll(ctx, 90*time.Second, failoverTick, name+" fresh ensemble takes a write", func() (bool, error) {
			for _, m := range s.members {
				if m.proc.exited() {
					return false, fmt.Errorf("%s exited: %v\n%s", m.proc.name, m.proc.exitErr, logTail(m.proc.logPath, 20))
				}
			}
			for _, m := range s.members {
				if w == nil {
					var err error
					if w, err = ops.writer(ctx, m.clientAddr, true); err != nil {
						continue
					}
				}
				actx, cancel := context.WithTimeout(ctx, time.Second)
				err := w.write(actx)
				cancel()
				if err == nil {
					return true, nil
				}
				w.close()
				w = nil
			}
			return false, nil
		})
		dur := time.Since(t0)
		if w != nil {
			w.close()
		}
		stop()
		if err != nil {
			return res, err
		}
		res.add(dur)
	}
	return res, nil
}
