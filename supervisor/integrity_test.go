package supervisor_test

// Lock integrity: another client deletes or changes the lock's nodes while
// a job runs (a foreign go-zookeeper session, as an operator's zkCli or a
// script with a wrong path would; on etcd an etcd client, as etcdctl del,
// put and lease revoke would), against the coordrun ensemble, Apache
// ZooKeeper and etcd. The holder's job is stopped and coordrun exits 78; the
// next holder starts only once the previous job is gone, checked against
// the job's process as the kernel saw it. With credentials, the same
// client is refused by the ensemble.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// foreign is a go-zookeeper session with no credentials.
func foreign(t *testing.T, b *backend) *zk.Conn {
	t.Helper()
	return testkit.DialZK(t, b.servers, 10*time.Second)
}

// lifeWatch polls pid every millisecond; last reports the latest moment
// it was seen alive. A start of the next job before that moment is a
// proven overlap.
type lifeWatch struct {
	mu   sync.Mutex
	seen time.Time
	dead chan struct{}
}

func watchLife(t *testing.T, pid int) *lifeWatch {
	w := &lifeWatch{seen: time.Now(), dead: make(chan struct{})}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			now := time.Now()
			if !alive(pid) {
				close(w.dead)
				return
			}
			w.mu.Lock()
			w.seen = now
			w.mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *lifeWatch) last() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// deleteAll deletes a folder and everything in it in one multi, as zkCli's
// deleteall does.
func deleteAll(conn *zk.Conn, dir string) error {
	var ops []any
	var walk func(p string) error
	walk = func(p string) error {
		kids, _, err := conn.Children(p)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := walk(path.Join(p, k)); err != nil {
				return err
			}
		}
		ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
		return nil
	}
	if err := walk(dir); err != nil {
		return err
	}
	_, err := conn.Multi(ops...)
	return err
}

func TestE2EForeignDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		modes := []string{"queue", "run", "queue-then-run", "run-then-queue", "deleteall", "setdata"}
		if b.etcd != nil {
			// etcdctl lease revoke: the holder's keys all go at once.
			modes = append(modes, "revoke")
		}
		for _, mode := range modes {
			t.Run(mode, func(t *testing.T) { foreignDelete(t, b, mode) })
		}
	})
}

// foreignStore is what another client does to the lock's records: a
// go-zookeeper session without credentials, or an etcd client (as
// etcdctl del, put and lease revoke would).
type foreignStore struct {
	t   *testing.T
	zk  *zk.Conn
	cli *clientv3.Client
}

func foreignOn(t *testing.T, b *backend) *foreignStore {
	t.Helper()
	if b.etcd == nil {
		return &foreignStore{t: t, zk: foreign(t, b)}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: b.etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &foreignStore{t: t, cli: cli}
}

func (f *foreignStore) ctx() context.Context { return testkit.Context(f.t, 10*time.Second) }

func (f *foreignStore) del(p string) error {
	if f.zk != nil {
		return f.zk.Delete(p, -1)
	}
	resp, err := f.cli.Delete(f.ctx(), p)
	if err == nil && resp.Deleted != 1 {
		err = fmt.Errorf("no key %s", p)
	}
	return err
}

// deleteAll removes dir and everything in it at once: zkCli's deleteall,
// or on etcd one transaction (etcdctl del --prefix).
func (f *foreignStore) deleteAll(dir string) error {
	if f.zk != nil {
		return deleteAll(f.zk, dir)
	}
	_, err := f.cli.Txn(f.ctx()).Then(clientv3.OpDelete(dir), clientv3.OpDelete(dir+"/", clientv3.WithPrefix())).Commit()
	return err
}

// set replaces p's data; on etcd a put also detaches the key from its
// lease, as etcdctl put does.
func (f *foreignStore) set(p string, data []byte) error {
	if f.zk != nil {
		_, err := f.zk.Set(p, data, -1)
		return err
	}
	_, err := f.cli.Put(f.ctx(), p, string(data))
	return err
}

// owned reports whether p exists bound to a session (an ephemeral node,
// or a key with a lease).
func (f *foreignStore) owned(p string) bool {
	if f.zk != nil {
		_, st, err := f.zk.Get(p)
		return err == nil && st.EphemeralOwner != 0
	}
	resp, err := f.cli.Get(f.ctx(), p)
	return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
}

// revoke revokes the lease p is attached to (etcd only).
func (f *foreignStore) revoke(p string) error {
	resp, err := f.cli.Get(f.ctx(), p)
	if err != nil || len(resp.Kvs) == 0 {
		return fmt.Errorf("the lease of %s: %v", p, err)
	}
	_, err = f.cli.Revoke(f.ctx(), clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

func foreignDelete(t *testing.T, b *backend, mode string) {
	r := newRig(t, b)
	// The holder's job ignores TERM (it records it), so it dies only of
	// the KILL that follows after the kill grace: the window in which a
	// successor could overlap it is as wide as it gets.
	a := r.supervise("A", nil, r.job("A", "-forever", "-trap", "TERM")...)
	startA := r.await(10*time.Second, "start", "A", "")
	life := watchLife(t, startA.pid())
	bb := r.supervise("B", nil, r.job("B", "-hold", "1s")...)
	ls := r.awaitQueue(10*time.Second, 1)
	if !ls.Holder.Holding {
		t.Fatalf("holder %s does not own the run node: %+v", ls.Holder.Node, ls)
	}
	dir := path.Join("/coordrun/locks", r.lock)
	queue, run := ls.Holder.Node, path.Join(dir, "run")
	conn := foreignOn(t, b)
	del := func(p string) {
		t.Helper()
		if err := conn.del(p); err != nil {
			t.Fatalf("foreign delete %s: %v", p, err)
		}
	}
	awaitTERM := func() { r.await(5*time.Second, "sig", "A", "TERM") }

	deleted := time.Now()
	switch mode {
	case "queue":
		del(queue)
	case "run":
		del(run)
	case "queue-then-run":
		// The second delete comes once the holder has reacted to the
		// first, as a second zkCli command would.
		del(queue)
		awaitTERM()
		del(run)
	case "run-then-queue":
		del(run)
		awaitTERM()
		testkit.WaitFor(t, 5*time.Second, "the holder to take its run node back", func() bool { return conn.owned(run) })
		del(queue)
	case "deleteall":
		if err := conn.deleteAll(dir); err != nil {
			t.Fatalf("deleteall %s: %v", dir, err)
		}
	case "setdata":
		if err := conn.set(queue, []byte("mine now")); err != nil {
			t.Fatalf("foreign setData %s: %v", queue, err)
		}
	case "revoke":
		if err := conn.revoke(queue); err != nil {
			t.Fatalf("foreign lease revoke: %v", err)
		}
	}
	select {
	case <-life.dead:
	case <-time.After(killGrace + 5*time.Second):
		t.Fatalf("the holder's job still runs %v after the foreign %s", time.Since(deleted), mode)
	}
	jobGone := life.last()
	if code := a.Exit(t, 10*time.Second); code != supervisor.ExitLockLost {
		t.Errorf("holder exited %d, want %d (lock lost); output:\n%s", code, supervisor.ExitLockLost, a.Out.String())
	}
	if !strings.Contains(a.Out.String(), "lock lost") {
		t.Errorf("holder's log does not say the lock was lost:\n%s", a.Out.String())
	}
	startB := r.await(sessionTimeout+killGrace+5*time.Second, "start", "B", "")
	if !startB.at.After(jobGone) {
		t.Errorf("overlap: B started at %v, A's job was still alive at %v", startB.at.Format(time.StampMicro), jobGone.Format(time.StampMicro))
	}
	if startB.token <= startA.token {
		t.Errorf("token did not rise: %d then %d", startA.token, startB.token)
	}
	// A waiter whose node was deleted joined again: its job must run
	// with the token of the node it holds by, not of the one it lost.
	if st := r.state(); st.Holder == nil || !st.Holder.Holding || st.Holder.Token != startB.token {
		t.Errorf("B's job runs with token %d, but the lock is held by %+v", startB.token, st.Holder)
	}
	if code := bb.Exit(t, 10*time.Second); code != 0 {
		t.Errorf("B exited %d, want 0", code)
	}
	term := "-"
	if x, ok := r.find("sig", "A", "TERM"); ok {
		term = ms(x.at.Sub(deleted))
	}
	t.Logf("foreign %s → TERM reached the holder's job %v, its job gone %v (kill grace %v), next holder started %v after the job (token %d → %d)",
		mode, term, ms(jobGone.Sub(deleted)), killGrace, ms(startB.at.Sub(jobGone)), startA.token, startB.token)
}

// With credentials, the ensemble itself refuses the foreign client; an
// unauthenticated status reads the lock where --acl lets everyone read
// (TestE2ERecordsACL: not without it); a supervisor with other credentials
// gets a clear refusal.
func TestE2EACL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		b.differs(t, "etcd has no per-key ACLs; its users' roles grant read or write on the prefix (TestEtcdRunBadInput in etcdengine)")
		r := newRig(t, b)
		auth := []string{"--auth", "ops:s3cret", "--acl", "world:anyone:r"}
		a := r.supervise("A", auth, r.job("A", "-after", r.path("go"))...)
		r.await(10*time.Second, "start", "A", "")
		bb := r.supervise("B", auth, r.job("B", "-hold", "50ms")...)
		ls := r.awaitQueue(10*time.Second, 1)
		dir := path.Join("/coordrun/locks", r.lock)
		conn := foreign(t, b)
		for what, err := range map[string]error{
			"delete the holder's queue node": conn.Delete(ls.Holder.Node, -1),
			"delete the run node":            conn.Delete(path.Join(dir, "run"), -1),
			"delete a waiter's node":         conn.Delete(ls.Waiters[0].Node, -1),
			"create a node in the folder": func() error {
				_, err := conn.Create(path.Join(dir, "lock-x-"), nil, zk.FlagSequence|zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				return err
			}(),
			"setData on the folder":        func() error { _, err := conn.Set(dir, []byte("x"), -1); return err }(),
			"setData on the holder's node": func() error { _, err := conn.Set(ls.Holder.Node, []byte("x"), -1); return err }(),
		} {
			if !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("foreign client could %s: %v, want NOAUTH", what, err)
			}
		}
		// The folder's own deletion is up to its parent's ACL, which this
		// test did not create; it holds children, so it stays anyway.
		if err := conn.Delete(dir, -1); err == nil {
			t.Errorf("foreign client deleted the lock folder")
		}
		// Anyone may still read who holds it.
		st := r.statusJSON()
		if st.Holder == nil || !st.Holder.Holding || st.Open {
			t.Errorf("status without credentials: %+v, want the holder, and the lock not open", st)
		}
		if !strings.Contains(st.ACL, "world:anyone:r") || !strings.Contains(st.ACL, "digest:ops:") {
			t.Errorf("lock folder ACL %q, want digest:ops all and world:anyone:r", st.ACL)
		}
		// Other credentials cannot join.
		other := r.supervise("C", []string{"--auth", "eve:pw"}, r.job("C")...)
		if code := other.Exit(t, 15*time.Second); code != supervisor.ExitUsage {
			t.Errorf("a supervisor with other credentials exited %d, want %d; output:\n%s", code, supervisor.ExitUsage, other.Out.String())
		}
		out := other.Out.String()
		for _, want := range []string{dir, "digest:ops:", "no permission"} {
			if !strings.Contains(out, want) {
				t.Errorf("refusal does not name %q:\n%s", want, out)
			}
		}
		// A folder someone set up with another ACL is used as it is, and
		// said so.
		pre := path.Join("/coordrun/locks", r.lock+"-pre")
		preACL := append(zk.DigestACL(zk.PermAll, "ops", "s3cret"), zk.ACL{Perms: zk.PermRead | zk.PermCreate, Scheme: "world", ID: "anyone"})
		admin := foreign(t, b)
		if err := admin.AddAuth("digest", []byte("ops:s3cret")); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Create(pre, nil, 0, preACL); err != nil {
			t.Fatal(err)
		}
		p := r.startProc("P", nil, e2eBin, append(append(r.runFlags(b.serverArg()), "--name", r.lock+"-pre"), append(auth, "--", "true")...)...)
		if code := p.Exit(t, 15*time.Second); code != 0 {
			t.Errorf("supervisor on a provisioned folder exited %d:\n%s", code, p.Out.String())
		}
		if !strings.Contains(p.Out.String(), "another ACL than configured") {
			t.Errorf("supervisor did not report the folder's other ACL:\n%s", p.Out.String())
		}
		if got, _, err := conn.GetACL(pre); err != nil || len(got) != 2 || got[1].Perms != zk.PermRead|zk.PermCreate {
			t.Errorf("provisioned folder's ACL now %+v (%v), want it unchanged", got, err)
		}
		r.touch("go")
		for _, p := range []*proc{a, bb} {
			if code := p.Exit(t, 10*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0", p.Name, code)
			}
		}
		t.Logf("foreign client refused on every write; status readable; other credentials refused: %s", firstLine(out, "no permission"))
	})
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// A TERM sent just as the lock passes to its receiver either makes it
// leave before its job starts, or reaches the job: never is it lost. Each
// trial releases the holder and signals the next in line at a random
// moment around the handoff.
func TestE2ESignalAtAcquisition(t *testing.T) {
	b := sharedCoordrun(t)
	const trials = 24
	var left, forwarded int
	// The signal lands around the moment B's job would start: the
	// handoff time seen so far, give or take 8ms.
	handoff := 30 * time.Millisecond
	for i := 0; i < trials; i++ {
		r := newRig(t, b)
		gate := r.path("release")
		a := r.supervise("A", nil, r.job("A", "-after", gate)...)
		r.await(10*time.Second, "start", "A", "")
		bb := r.supervise("B", nil, r.job("B", "-hold", "5s", "-trap", "TERM", "-die", "TERM")...)
		r.awaitQueue(10*time.Second, 1)
		delay := max(0, handoff+time.Duration(rand.IntN(16000)-8000)*time.Microsecond)
		released := time.Now()
		r.touch("release")
		time.AfterFunc(delay, func() { bb.Signal(syscall.SIGTERM) })
		code := bb.Exit(t, 15*time.Second)
		startB, started := r.find("start", "B", "")
		if started {
			handoff = (handoff + startB.at.Sub(released)) / 2
		}
		_, got := r.find("sig", "B", "TERM")
		switch {
		case started && !got:
			t.Errorf("trial %d (TERM %v after the release): B's job started and never got the TERM (B exited %d)", i, delay, code)
		case started:
			forwarded++
		default:
			left++
		}
		if code != 128+int(syscall.SIGTERM) {
			t.Errorf("trial %d: B exited %d, want %d", i, code, 128+int(syscall.SIGTERM))
		}
		if code := a.Exit(t, 10*time.Second); code != 0 {
			t.Errorf("trial %d: A exited %d", i, code)
		}
	}
	t.Logf("%d trials, TERM sent around the handoff (last estimate %v): it reached the job %d times, made B leave before its job %d times", trials, ms(handoff), forwarded, left)
}

// The lock recipe's ACL notation.
func TestParseACL(t *testing.T) {
	acl, err := recipe.ParseACL("digest:ops:abc:def=:cdrwa, world:anyone:r,ip:::1:rw,auth::all")
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.ACL{
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:abc:def="}},
		{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}},
		{Perms: wire.PermRead | wire.PermWrite, ID: wire.ID{Scheme: "ip", ID: "::1"}},
		{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth", ID: ""}},
	}
	if fmt.Sprint(acl) != fmt.Sprint(want) {
		t.Errorf("ParseACL = %+v, want %+v", acl, want)
	}
	if got := recipe.FormatACL(acl); got != "digest:ops:abc:def=:cdrwa,world:anyone:r,ip:::1:rw,auth::cdrwa" {
		t.Errorf("FormatACL = %q", got)
	}
	for _, bad := range []string{"", "world:anyone", "world:anyone:x", "world:anyone:", ":anyone:r", "digest::r"} {
		if _, err := recipe.ParseACL(bad); err == nil {
			t.Errorf("ParseACL(%q) accepted", bad)
		}
	}
}

// A cron firing whose record or lock another client deletes while it runs
// is stopped; the host goes on scheduling. With credentials, the same
// client is refused.
func TestCronForeignDelete(t *testing.T) {
	b := sharedCoordrun(t)
	for _, tc := range []struct {
		name string
		auth []string
	}{{"open", nil}, {"auth", []string{"--auth", "cron:pw", "--acl", "world:anyone:r"}}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, b)
			root, job := "/cron-integrity-"+randHex(4), "nightly"
			jobFlags := []string{"-forever", "-trap", "TERM"}
			if tc.auth != nil {
				// Nothing stops this one but the host's own TERM at the end.
				jobFlags = append(jobFlags, "-exitafter", "1")
			}
			procs := cronStartProcs(r, 1, "c", root, job, "@every 1s", tc.auth, r.job("J", jobFlags...))
			start := r.await(15*time.Second, "start", "J", "")
			life := watchLife(t, start.pid())
			conn := foreign(t, b)
			firings := path.Join(root, job, "firings")
			var running string
			testkit.WaitFor(t, 5*time.Second, "the firing's record to say running", func() bool {
				kids, _, err := conn.Children(firings)
				if err != nil {
					return false
				}
				for _, k := range kids {
					data, _, err := conn.Get(path.Join(firings, k))
					if err == nil && strings.Contains(string(data), `"state":"running"`) {
						running = path.Join(firings, k)
						return true
					}
				}
				return false
			})
			err := conn.Delete(running, -1)
			if tc.auth != nil {
				if !errors.Is(err, zk.ErrNoAuth) {
					t.Errorf("foreign delete of the firing %s: %v, want NOAUTH", running, err)
				}
				if err := conn.Delete(path.Join(root, job, "lock", "run"), -1); !errors.Is(err, zk.ErrNoAuth) {
					t.Errorf("foreign delete of the firing's run node: %v, want NOAUTH", err)
				}
				if _, err := conn.Set(running, []byte("{}"), -1); !errors.Is(err, zk.ErrNoAuth) {
					t.Errorf("foreign setData on the firing: %v, want NOAUTH", err)
				}
				select {
				case <-life.dead:
					t.Errorf("the firing's job died although every foreign write was refused")
				default:
				}
				cronStopProcs(t, procs)
				return
			}
			if err != nil {
				t.Fatalf("foreign delete of %s: %v", running, err)
			}
			deleted := time.Now()
			select {
			case <-life.dead:
			case <-time.After(cronKillGrace + 5*time.Second):
				t.Fatalf("the firing's job still runs %v after its record was deleted", time.Since(deleted))
			}
			t.Logf("firing record deleted → its job gone %v (kill grace %v)", ms(life.last().Sub(deleted)), cronKillGrace)
			if !procs[0].Running() {
				t.Fatalf("the cron host exited (%d) after losing one firing; output:\n%s", procs[0].ExitCode(), procs[0].Out.String())
			}
			if !strings.Contains(procs[0].Out.String(), "lock lost") {
				t.Errorf("the cron host's log does not say the firing was lost:\n%s", procs[0].Out.String())
			}
			cronStopProcs(t, procs)
		})
	}
}
