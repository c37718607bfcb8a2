package zkengine_test

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// A handoff: from the holder's Release to its waiter's Acquire returning,
// on a plain lock and on a semaphore of N = 2 with both slots busy, on one
// coordrun member. Reports the median as handoff-p50-µs.
func BenchmarkHandoff(b *testing.B) {
	addr := ensembletest.Start(b, 1).ClientAddr(0)
	for _, holders := range []int{1, 2} {
		b.Run("holders="+strconv.Itoa(holders), func(b *testing.B) {
			dial := func() engine.Conn {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				c, err := zkengine.Dial(ctx, zkengine.DialOptions{Servers: []string{addr}, SessionTimeout: 4 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				return c
			}
			ctx := context.Background()
			dir := "/bench/handoff-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			conns := []engine.Conn{dial(), dial(), dial()}
			enter := func(c engine.Conn) engine.Entry {
				e, err := engine.EnterSemaphore(ctx, c, dir, state.HolderInfo{Host: "bench", Holders: holders})
				if err != nil {
					b.Fatal(err)
				}
				return e
			}
			acquire := func(e engine.Entry, ready chan<- struct{}) {
				err := e.Acquire(ctx, func(st engine.Status) {
					if ready != nil && (holders == 1 && st.Position == 1 || st.HolderNode == engine.SemaphoreHeld) {
						close(ready)
						ready = nil
					}
				})
				if err != nil {
					b.Error(err)
				}
			}
			// The other slot, held throughout.
			if holders == 2 {
				acquire(enter(conns[2]), nil)
			}
			holder := enter(conns[0])
			acquire(holder, nil)
			turn := 1
			var took []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				waiter := enter(conns[turn])
				done := make(chan struct{})
				var at time.Time
				ready := make(chan struct{})
				go func() { acquire(waiter, ready); at = time.Now(); close(done) }()
				<-ready
				b.StartTimer()
				start := time.Now()
				if err := holder.Release(ctx); err != nil {
					b.Fatal(err)
				}
				<-done
				took = append(took, at.Sub(start))
				holder, turn = waiter, 1-turn
			}
			b.StopTimer()
			sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "handoff-p50-µs")
			_ = holder.Release(ctx)
		})
	}
}
