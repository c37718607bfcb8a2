package supervisor_test

// The chaos runs' store on etcd: three real etcd members (internal/testkit)
// behind the member faults the schedule draws, and the check that a
// faulted holder's job died while etcd still counted its lease alive.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/coordrun/coordrun/internal/testkit"
)

// chaosMembers is the store a chaos run faults: coordrun server processes
// (*chaos.Cluster) or etcd members (etcdMembers).
type chaosMembers interface {
	N() int
	// Servers is every member's client address, host:port, comma-separated.
	Servers() string
	Leader(ctx context.Context) (int, error)
	Kill(i int) error
	Restart(i int) error
	Pause(i int) error
	Resume(i int) error
	// WaitHealthy waits until every member runs and the cluster has a
	// leader again.
	WaitHealthy(ctx context.Context) error
	Close()
}

// Of the fault kinds, those a chaos run on etcd draws: the member faults
// that need no coordrun member (its proxies and admin words), and every
// holder fault. A foreign client's deletes and revoke on etcd are
// TestE2EForeignDelete's etcd row.
var (
	chaosEtcdKinds     = []string{faultLeaderKill, faultMemberPause, faultSupKill, faultSupStop, faultSupCut, faultSupDrop, faultHolderFreeze}
	chaosEtcdCronKinds = []string{faultSupKill, faultSupStop, faultHolderFreeze, faultSupCut, faultLeaderKill}
)

// etcdMembers is a 3-member etcd cluster as chaosMembers.
type etcdMembers struct {
	c   *testkit.EtcdCluster
	cli *clientv3.Client // on every member: asks who leads
}

func newEtcdMembers(t *testing.T, b *backend) *etcdMembers {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: b.etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &etcdMembers{c: b.etcd, cli: cli}
}

func (m *etcdMembers) N() int { return len(m.c.Members) }

func (m *etcdMembers) Servers() string {
	var s []string
	for _, u := range m.c.Endpoints() {
		s = append(s, strings.TrimPrefix(u, "http://"))
	}
	return strings.Join(s, ",")
}

// Leader is the member that says it leads, asked one by one.
func (m *etcdMembers) Leader(ctx context.Context) (int, error) {
	for ctx.Err() == nil {
		for i, mem := range m.c.Members {
			if !mem.Proc.Running() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			st, err := m.cli.Status(sctx, mem.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return -1, fmt.Errorf("no etcd leader: %w", ctx.Err())
}

func (m *etcdMembers) Kill(i int) error    { m.c.Kill(i); return nil }
func (m *etcdMembers) Restart(i int) error { m.c.Restart(i); return nil }
func (m *etcdMembers) Pause(i int) error   { return m.c.Members[i].Proc.Signal(syscall.SIGSTOP) }
func (m *etcdMembers) Resume(i int) error  { return m.c.Members[i].Proc.Signal(syscall.SIGCONT) }

func (m *etcdMembers) WaitHealthy(ctx context.Context) error {
	for {
		ok := true
		for i, mem := range m.c.Members {
			ok = ok && mem.Proc.Running() && m.c.Healthy(i)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("etcd members not healthy: " + ctx.Err().Error())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close kills the members (a paused one too), so that no supervisor left
// over reaches them.
func (m *etcdMembers) Close() {
	for i, mem := range m.c.Members {
		if mem.Proc.Running() {
			_ = m.Resume(i)
			m.c.Kill(i)
		}
	}
}

// leaseAlive returns, on etcd, a check to call once the job of target's
// holder was seen dead after kind was aimed at it: etcd's own TimeToLive
// must still count that holder's lease alive (≥ 0), or the job outlived
// the lease and a successor could have overlapped it. The lease is looked
// up now, by the entry whose create revision is the token. Elsewhere the
// check does nothing: checkChaos's overlap check covers the other stores.
func (w *chaosWorld) leaseAlive(kind string, target chaosRec) func() {
	em, ok := w.members.(*etcdMembers)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := w.lockDir + "/"
	if w.lockDir == "" {
		dir = path.Join("/coordrun/locks", w.r.lock) + "/"
	}
	var lease clientv3.LeaseID
	for lease == 0 && ctx.Err() == nil {
		resp, err := em.cli.Get(ctx, dir, clientv3.WithPrefix())
		if err != nil {
			chaosRetryPause(ctx) // a member fault beside this one: ask again
			continue
		}
		for _, kv := range resp.Kvs {
			if kv.CreateRevision == target.token {
				lease = clientv3.LeaseID(kv.Lease)
			}
		}
		if lease == 0 {
			w.logf("%s: no key of token %d under %s; its lease cannot be checked", kind, target.token, dir)
			return func() {}
		}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			resp, err := em.cli.TimeToLive(ctx, lease)
			if err == nil {
				w.logf("%s: the job of %s is dead; etcd's TimeToLive of its lease %x: %ds", kind, target.host, int64(lease), resp.TTL)
				if resp.TTL < 0 {
					w.problem("%s: the job of %s (token %d) was seen dead only after etcd had expired its lease %x", kind, target.host, target.token, int64(lease))
				}
				return
			}
			if ctx.Err() != nil {
				w.problem("%s: TimeToLive of lease %x: %v", kind, int64(lease), err)
				return
			}
			chaosRetryPause(ctx)
		}
	}
}

// chaosRetryPause paces a retry of a request that failed while a member
// fault lasts.
func chaosRetryPause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond):
	}
}
