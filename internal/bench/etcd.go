package main

// etcd (-systems etcd): three `etcd` members (Debian's etcd-server, 3.4)
// on loopback with their own data dirs and default settings (100 ms
// heartbeat, 1 s election timeout), driven through go.etcd.io/etcd/client/v3
// with one client (its own gRPC connection) per simulated client.
//
//   - write: Put of -value-size bytes to the client's own key.
//   - read: serializable Get (answered by the member the client talks to,
//     like ZooKeeper's getData); read-lin: linearizable Get (a read index
//     through the leader, like sync+getData).
//   - pred xN: concurrency.Mutex, which waits on the deletion of the key
//     created just before its own (the predecessor-watch recipe).
//   - herd xN: every waiter keeps a watch on the lock's prefix and
//     re-reads the first key after each event.
//   - notifications: watch events delivered to the harness's clients,
//     counted by a wrapper around each client's Watcher.
//   - crash: a holder process (this binary re-executed) holds the mutex
//     with a lease of the session timeout's TTL and is SIGKILLed, so its
//     lease is not revoked but must expire.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// holderEnv makes the bench binary the etcd crash workload's lock holder:
// "endpoint,ttl-seconds,prefix".
const holderEnv = "COORDRUN_BENCH_ETCD_HOLDER"

func init() {
	if v := os.Getenv(holderEnv); v != "" {
		os.Exit(etcdHolderMain(v))
	}
}

// launchEtcd starts three etcd members under dir without waiting for them.
func launchEtcd(bin, dir string) (*system, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(6) // client, peer per member
	if err != nil {
		return nil, err
	}
	var cluster []string
	for i := 1; i <= 3; i++ {
		cluster = append(cluster, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, ports[2+i]))
	}
	sys := &system{name: "etcd"}
	for i := 1; i <= 3; i++ {
		m := &member{id: i, clientAddr: fmt.Sprintf("127.0.0.1:%d", ports[i-1])}
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2+i])
		p, err := startProc(fmt.Sprintf("etcd-%d", i), filepath.Join(dir, fmt.Sprintf("e%d.log", i)),
			bin, "--name", fmt.Sprintf("e%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("e%d", i)),
			"--listen-client-urls", "http://"+m.clientAddr,
			"--advertise-client-urls", "http://"+m.clientAddr,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","),
			"--initial-cluster-token", "bench",
			"--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "warn")
		if err != nil {
			return sys, err
		}
		m.proc = p
		sys.members = append(sys.members, m)
	}
	return sys, nil
}

// startEtcd starts three etcd members and waits until they serve.
func startEtcd(ctx context.Context, bin, dir string) (*system, error) {
	sys, err := launchEtcd(bin, dir)
	if err != nil {
		return sys, err
	}
	return sys, waitEtcd(ctx, sys, 30*time.Second)
}

// etcdClient is a client of the given members that logs nothing.
func etcdClient(addrs ...string) (*clientv3.Client, error) {
	eps := make([]string, len(addrs))
	for i, a := range addrs {
		eps[i] = "http://" + a
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// waitEtcd polls every member's status until all answer and agree on one
// leader, and records roles and the version.
func waitEtcd(ctx context.Context, sys *system, timeout time.Duration) error {
	c, err := etcdClient(sys.addrs()...)
	if err != nil {
		return err
	}
	defer c.Close()
	var last string
	err = poll(ctx, timeout, 100*time.Millisecond, "etcd ensemble serving", func() (bool, error) {
		leaders := map[uint64]bool{}
		for _, m := range sys.members {
			if m.proc.exited() {
				return false, fmt.Errorf("%s exited: %v\n%s", m.proc.name, m.proc.exitErr, logTail(m.proc.logPath, 20))
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(sctx, "http://"+m.clientAddr)
			cancel()
			if err != nil || st.Leader == 0 {
				last = fmt.Sprintf("%s: %v", m.clientAddr, err)
				return false, nil
			}
			leaders[st.Leader] = true
			m.role = "follower"
			if st.Header.MemberId == st.Leader {
				m.role = "leader"
			}
			sys.version = "etcd " + st.Version
		}
		return len(leaders) == 1, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)\n%s", err, last, sys.logs())
	}
	return nil
}

// etcdKey is client i's key.
func etcdKey(i int) string { return nodePath(i) }

func prepareEtcd(ctx context.Context, s *system, n int, value []byte) error {
	c, err := etcdClient(s.addrs()...)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, err := c.Put(ctx, etcdKey(i), string(value)); err != nil {
			return err
		}
	}
	return nil
}

// etcdTarget drives s: client i talks to the i-th member of clientOrder.
// Reads are serializable unless linearizable is set.
func etcdTarget(s *system, value []byte, linearizable bool) target {
	order := s.clientOrder()
	val := string(value)
	return target{name: s.name, cpu: s.cpu, open: func(ctx context.Context, i int) (worker, error) {
		c, err := etcdClient(order[i%len(order)])
		if err != nil {
			return worker{}, err
		}
		key := etcdKey(i)
		var readOpts []clientv3.OpOption
		if !linearizable {
			readOpts = append(readOpts, clientv3.WithSerializable())
		}
		// One round trip before the window, so the connection is up.
		if _, err := c.Get(ctx, key, readOpts...); err != nil {
			c.Close()
			return worker{}, err
		}
		return worker{close: func() { c.Close() }, op: func(ctx context.Context, write bool) error {
			if write {
				_, err := c.Put(ctx, key, val)
				return err
			}
			_, err := c.Get(ctx, key, readOpts...)
			return err
		}}, nil
	}}
}

// countingWatcher counts the watch events its client receives and the
// watches the server has confirmed (created).
type countingWatcher struct {
	clientv3.Watcher
	events  *atomic.Int64
	created atomic.Int64
}

func (w *countingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, append(opts, clientv3.WithCreatedNotify())...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.Created {
				w.created.Add(1)
			}
			w.events.Add(int64(len(wr.Events)))
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// lockClient is one etcd client with its session, counting its watches.
type lockClient struct {
	c    *clientv3.Client
	w    *countingWatcher
	sess *concurrency.Session
}

func newLockClient(addr string, ttl int, events *atomic.Int64) (*lockClient, error) {
	c, err := etcdClient(addr)
	if err != nil {
		return nil, err
	}
	w := &countingWatcher{Watcher: c.Watcher, events: events}
	c.Watcher = w
	sess, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &lockClient{c: c, w: w, sess: sess}, nil
}

func (l *lockClient) close() {
	if l == nil {
		return
	}
	_ = l.sess.Close() // revokes the lease
	_ = l.c.Close()
}

func closeLockClients(ls []*lockClient) {
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() { defer wg.Done(); l.close() }()
	}
	wg.Wait()
}

// lockTTL is the lease TTL of the handoff runs' sessions, in seconds. With
// 10 s (the ZooKeeper sessions' timeout), leases of the 1000-waiter run
// expired on a loaded 2-CPU machine and Mutex.Lock failed with "session is
// expired"; the handoff does not depend on the TTL.
const lockTTL = 30

// runEtcdLock is one handoff run of n etcd clients in this process with
// recipe "pred" (concurrency.Mutex) or "herd", measuring the first limit
// holders (all when limit <= 0).
func runEtcdLock(ctx context.Context, s *system, recipe string, n, limit int) (handoffResult, error) {
	res := handoffResult{Workload: recipe, System: s.name, Waiters: n}
	if limit <= 0 || limit > n {
		limit = n
	}
	pfx := fmt.Sprintf("/bench-lock/%s-%d", recipe, n)
	order := s.clientOrder()
	var events atomic.Int64
	gate, err := newLockClient(order[0], lockTTL, &events)
	if err != nil {
		return res, err
	}
	defer gate.close()
	gateMu := concurrency.NewMutex(gate.sess, pfx)
	if err := gateMu.Lock(ctx); err != nil {
		return res, fmt.Errorf("gate: %w", err)
	}
	clients := make([]*lockClient, n)
	defer func() { closeLockClients(clients) }()
	if err := parallelLimit(n, 32, func(i int) (err error) {
		clients[i], err = newLockClient(order[i%len(order)], lockTTL, &events)
		return err
	}); err != nil {
		return res, err
	}

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*time.Second)
	defer cancel()
	stopCtx, stop := context.WithCancel(wctx) // ends the unmeasured waiters
	defer stop()
	spans := make([]stamp, n)
	held := make([]bool, n)
	var holders atomic.Int64
	// acquired is called by whoever holds; the limit-th holder keeps the
	// lock so that nobody else gets it while the rest are stopped.
	acquired := func(i int) (release bool) {
		spans[i].start = time.Now()
		spans[i].end = spans[i].start
		held[i] = true
		if holders.Add(1) == int64(limit) {
			stop()
			return false
		}
		return true
	}

	var errs = make([]error, n)
	var wg sync.WaitGroup
	keys := make([]string, n)
	if recipe == "herd" {
		// Phase 1: everyone queues; phase 2 (below): everyone watches.
		if err := parallel(n, func(i int) error {
			l := clients[i]
			keys[i] = fmt.Sprintf("%s/%x", pfx, l.sess.Lease())
			_, err := l.c.Put(ctx, keys[i], "", clientv3.WithLease(l.sess.Lease()))
			return err
		}); err != nil {
			return res, err
		}
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if recipe == "herd" {
				err = etcdHerdWait(stopCtx, clients[i], pfx, keys[i], func() bool { return acquired(i) })
			} else {
				mu := concurrency.NewMutex(clients[i].sess, pfx)
				if err = mu.Lock(stopCtx); err == nil && acquired(i) {
					err = mu.Unlock(wctx)
				}
			}
			if err != nil && stopCtx.Err() == nil {
				errs[i] = err
			}
		}()
	}
	// Every waiter's watch is in place before the gate opens.
	err = poll(ctx, 60*time.Second, 10*time.Millisecond, fmt.Sprintf("%d etcd waiters watching", n), func() (bool, error) {
		armed := 0
		for _, l := range clients {
			if l.w.created.Load() > 0 {
				armed++
			}
		}
		return armed == n, errors.Join(errs...)
	})
	if err != nil {
		stop()
		wg.Wait()
		return res, err
	}
	before := events.Load()
	released := time.Now()
	if err := gateMu.Unlock(ctx); err != nil {
		stop()
		wg.Wait()
		return res, fmt.Errorf("gate release: %w", err)
	}
	select {
	case <-stopCtx.Done():
	case <-ctx.Done():
	}
	after := events.Load()
	stop()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if int(holders.Load()) < limit {
		return res, fmt.Errorf("%d of %d holders before %v", holders.Load(), limit, wctx.Err())
	}
	var got []stamp
	for i := range spans {
		if held[i] {
			got = append(got, spans[i])
		}
	}
	res.Waiters = n
	res.summarize(got, released)
	res.Notifications = float64(after - before)
	res.NotifPerRelease = res.Notifications / float64(limit)
	return res, nil
}

// etcdHerdWait waits until key is the first key under pfx, waking on every
// change under pfx, then calls held and deletes key if it says so.
func etcdHerdWait(ctx context.Context, l *lockClient, pfx, key string, held func() bool) error {
	first := func() (bool, int64, error) {
		r, err := l.c.Get(ctx, pfx+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			return false, 0, err
		}
		return len(r.Kvs) > 0 && string(r.Kvs[0].Key) == key, r.Header.Revision, nil
	}
	ok, rev, err := first()
	if err != nil {
		return err
	}
	if ok {
		return errors.New("herd: holds before the gate opened")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := l.c.Watch(wctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) == 0 {
			continue
		}
		if ok, _, err = first(); err != nil {
			return err
		}
		if ok {
			if held() {
				_, err := l.c.Delete(ctx, key)
				return err
			}
			return nil
		}
	}
	return ctx.Err()
}

// etcdHolderMain is the crash workload's holder process: it takes the
// mutex with a lease of ttl seconds, says "held <granted ttl>" on stdout
// and waits to be killed.
func etcdHolderMain(spec string) int {
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "holder: bad spec", spec)
		return 2
	}
	ttl, err := strconv.Atoi(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 2
	}
	var events atomic.Int64
	l, err := newLockClient(parts[0], ttl, &events)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	ctx := context.Background()
	if err := concurrency.NewMutex(l.sess, parts[2]).Lock(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	granted := int64(ttl)
	if r, err := l.c.TimeToLive(ctx, l.sess.Lease()); err == nil {
		granted = r.GrantedTTL
	}
	fmt.Printf("held %d\n", granted)
	<-l.sess.Done() // until killed
	return 1
}

// runEtcdCrash kills a holder process and returns the time from the kill
// until an in-process waiter with the same lease TTL holds, and the TTL
// the holder was granted.
func runEtcdCrash(ctx context.Context, e *lockEnv, s *system, name string, timeout time.Duration) (time.Duration, time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	ttl := max(1, int((timeout+time.Second-1)/time.Second))
	pfx := "/bench-crash/" + name
	order := s.clientOrder()
	out, log := e.files("etcd-holder-" + name)
	env := append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s", holderEnv, order[0], ttl, pfx))
	holder, err := startJobProc("etcd holder "+name, out, log, env, exe)
	if err != nil {
		return 0, 0, err
	}
	defer holder.stop(time.Second)
	var granted time.Duration
	if err := poll(ctx, 30*time.Second, 5*time.Millisecond, name+": holder holds", func() (bool, error) {
		if holder.exited() {
			return false, fmt.Errorf("holder exited: %v\n%s", holder.exitErr, logTail(log, 10))
		}
		b, _ := os.ReadFile(out)
		line, _, ok := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); ok && len(f) == 2 && f[0] == "held" {
			n, _ := strconv.Atoi(f[1])
			granted = time.Duration(n) * time.Second
			return true, nil
		}
		return false, nil
	}); err != nil {
		return 0, 0, err
	}
	var events atomic.Int64
	w, err := newLockClient(order[len(order)-1], ttl, &events)
	if err != nil {
		return 0, 0, err
	}
	defer w.close()
	locked := make(chan error, 1)
	at := make(chan time.Time, 1)
	lctx, cancel := context.WithTimeout(ctx, 4*timeout+30*time.Second)
	defer cancel()
	mu := concurrency.NewMutex(w.sess, pfx)
	go func() {
		err := mu.Lock(lctx)
		at <- time.Now()
		locked <- err
	}()
	if err := poll(ctx, 30*time.Second, 5*time.Millisecond, name+": waiter watching", func() (bool, error) {
		select {
		case err := <-locked:
			return false, fmt.Errorf("waiter returned before the kill: %v", err)
		default:
		}
		return w.w.created.Load() > 0, nil
	}); err != nil {
		return 0, 0, err
	}
	killed := time.Now()
	if err := syscall.Kill(holder.pid(), syscall.SIGKILL); err != nil {
		return 0, 0, err
	}
	t := <-at
	if err := <-locked; err != nil {
		return 0, 0, fmt.Errorf("%s: waiter: %w", name, err)
	}
	_ = mu.Unlock(ctx)
	return t.Sub(killed), granted, nil
}

// etcdInstalled is the etcd binary's path, or an error saying how to get it.
func etcdInstalled(bin string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s not found (Debian: apt-get install etcd-server)", bin)
	}
	return p, nil
}
