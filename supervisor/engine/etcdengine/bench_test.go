package etcdengine

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/coordrun/coordrun/internal/testkit"
)

// Handoff: the holder releases, and the one waiter behind it holds; the
// time between the release's start and the waiter's Acquire returning.
// The engine's lock beside etcd's own concurrency.Mutex, on the same
// three members in the same run (go test -bench EtcdHandoff -run ^$).
func BenchmarkEtcdHandoff(b *testing.B) {
	c := testkit.StartEtcd(b, 3)
	b.Run("engine", func(b *testing.B) {
		conns := [2]*Conn{dial(b, c, 10*time.Second), dial(b, c, 10*time.Second)}
		ctx := context.Background()
		var samples []time.Duration
		cur, err := conns[0].Enter(ctx, "/coordrun/locks/bench", holder("a", 10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := cur.Acquire(ctx, nil); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next, err := conns[(i+1)%2].Enter(ctx, "/coordrun/locks/bench", holder("b", 10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- next.Acquire(ctx, nil) }()
			waitQueued(b, conns[0], 2)
			start := time.Now()
			if err := cur.Release(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-got; err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
			cur = next
		}
		b.StopTimer()
		_ = cur.Release(ctx)
		reportP50(b, samples)
	})
	b.Run("etcd-mutex", func(b *testing.B) {
		var sessions [2]*concurrency.Session
		for i := range sessions {
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cli.Close() })
			if sessions[i], err = concurrency.NewSession(cli, concurrency.WithTTL(10)); err != nil {
				b.Fatal(err)
			}
		}
		ctx := context.Background()
		var samples []time.Duration
		cur := concurrency.NewMutex(sessions[0], "/bench/mutex/")
		if err := cur.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next := concurrency.NewMutex(sessions[(i+1)%2], "/bench/mutex/")
			got := make(chan error, 1)
			go func() { got <- next.Lock(ctx) }()
			testkit.WaitFor(b, 10*time.Second, "the waiter queued", func() bool {
				r, err := sessions[0].Client().Get(ctx, "/bench/mutex/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err == nil && r.Count == 2
			})
			start := time.Now()
			if err := cur.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-got; err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
			cur = next
		}
		b.StopTimer()
		_ = cur.Unlock(ctx)
		reportP50(b, samples)
	})
}

func waitQueued(b *testing.B, conn *Conn, n int) {
	testkit.WaitFor(b, 10*time.Second, "the waiter queued", func() bool {
		q, err := conn.List(context.Background(), "/coordrun/locks/bench")
		return err == nil && len(q.Contenders) == n
	})
}

func reportP50(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds())/1000, "p99-ms")
}
