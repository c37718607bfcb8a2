package ensemble

// mntr's figures, gathered from the member for zk.Mntr: fourletter.go's
// longest word, kept in a file of its own.

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// mntrFigures are mntr's, read from the member's state; a leader asks
// its followers for their status (followerSync).
func (m *Member) mntrFigures() *zk.MntrFigures {
	_, eph, size := m.counts()
	sums := m.latencySummaries()
	f := &zk.MntrFigures{
		Figures:       *m.figures(),
		Ephemerals:    eph,
		Sessions:      m.track.count(),
		Watches:       m.watch.count(),
		DataSize:      size,
		OpenFDs:       openFileDescriptors(),
		MaxFDs:        maxFileDescriptors(),
		UptimeMs:      time.Since(processStart).Milliseconds(),
		Proposals:     int64(histogramCount(m.stats.grouped)),
		BytesReceived: m.stats.bytesIn.Load(), BytesOut: m.stats.bytesOut.Load(),
		Notifications: m.stats.notifications.Load(),
		ReadLatency:   sums["readlatency"], UpdateLatency: sums["updatelatency"],
	}
	if f.Mode != "leader" && f.Mode != "follower" {
		return f
	}
	var servers []raft.Server
	if cf := m.raft.GetConfiguration(); cf.Error() == nil {
		servers = cf.Configuration().Servers
	}
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			f.QuorumSize++
		}
	}
	if f.Mode == "leader" {
		f.Learners, f.SyncedFollowers, f.SyncedObservers = m.followerSync(servers)
		f.Followers = m.followerIDs()
	}
	return f
}

// syncAnswerWait bounds how long a leader's mntr waits for its followers'
// status: one that cannot answer within it is not in sync in any sense
// a monitor cares about.
const syncAnswerWait = 500 * time.Millisecond

// followerSync asks the other members of the configuration for their
// status: learners are those that answer, synced the voters among them
// that follow this member, observers likewise the non-voters. (ZooKeeper
// counts the followers connected to its leader and done syncing; raft
// keeps no such record a caller can read, so the members are asked.)
func (m *Member) followerSync(servers []raft.Server) (learners, synced, observers int) {
	type answer struct {
		voter bool
		st    MemberStatus
		ok    bool
	}
	ctx, cancel := context.WithTimeout(m.ctx, syncAnswerWait)
	defer cancel()
	answers := make(chan answer, len(servers))
	asked := 0
	for _, s := range servers {
		if string(s.ID) == m.cfg.ID {
			continue
		}
		asked++
		m.tr.Go(func() {
			a := answer{voter: s.Suffrage == raft.Voter}
			payload, err := m.pool.call(ctx, string(s.Address), rpcStatus, nil)
			a.ok = err == nil && json.Unmarshal(payload, &a.st) == nil
			answers <- a
		})
	}
	for ; asked > 0; asked-- {
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return learners, synced, observers
		}
		if !a.ok {
			continue
		}
		learners++
		if a.st.Leader != m.cfg.ID || a.st.State != "follower" {
			continue
		}
		if a.voter {
			synced++
		} else {
			observers++
		}
	}
	return learners, synced, observers
}

// followerIDs are the other members of the configuration, in its order.
func (m *Member) followerIDs() []string {
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	var ids []string
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) != m.cfg.ID {
			ids = append(ids, string(s.ID))
		}
	}
	return ids
}

// updateOps are the requests ZooKeeper times as updatelatency: those that
// become a transaction. Every other request is a read.
var updateOps = func() map[string]bool {
	ops := map[string]bool{}
	for _, op := range []int32{wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL,
		wire.OpDelete, wire.OpDeleteContainer, wire.OpSetData, wire.OpSetACL, wire.OpCheck,
		wire.OpMulti, wire.OpReconfig, wire.OpCreateSession, wire.OpCloseSession} {
		ops[wire.OpName(op)] = true
	}
	return ops
}()

// latencySummaries are readlatency and updatelatency from the request
// duration histogram, which never resets, as ZooKeeper's summaries do
// not. cnt and sum (hence avg) are exact; min, max and the percentiles
// are bounds of the histogram's buckets (min the lower bound of the first
// bucket used, the others the upper bound of the bucket they fall in),
// in whole milliseconds.
func (m *Member) latencySummaries() map[string]zk.Summary {
	type merged struct {
		cnt    uint64
		sum    float64
		bounds []float64
		cum    []uint64
	}
	groups := map[string]*merged{"readlatency": {}, "updatelatency": {}}
	ch := make(chan prometheus.Metric)
	go func() {
		m.stats.latency.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil || d.GetHistogram() == nil {
			continue
		}
		name := "readlatency"
		for _, l := range d.GetLabel() {
			if l.GetName() == "op" && updateOps[l.GetValue()] {
				name = "updatelatency"
			}
		}
		g, h := groups[name], d.GetHistogram()
		g.cnt += h.GetSampleCount()
		g.sum += h.GetSampleSum()
		for i, bk := range h.GetBucket() {
			if i == len(g.bounds) {
				g.bounds = append(g.bounds, bk.GetUpperBound())
				g.cum = append(g.cum, 0)
			}
			g.cum[i] += bk.GetCumulativeCount()
		}
	}
	out := map[string]zk.Summary{}
	for name, g := range groups {
		s := zk.Summary{Cnt: int64(g.cnt), SumExact: g.sum * 1e3, Sum: int64(math.Round(g.sum * 1e3))}
		if g.cnt > 0 && len(g.bounds) > 0 {
			ms := func(sec float64) int64 { return int64(math.Floor(sec * 1e3)) }
			// upper is the bound of the first bucket holding more than
			// n samples; past the last bucket, its bound is all that is
			// known.
			upper := func(n uint64) int64 {
				for i, c := range g.cum {
					if c > n {
						return ms(g.bounds[i])
					}
				}
				return ms(g.bounds[len(g.bounds)-1])
			}
			for i, c := range g.cum {
				if c > 0 {
					if i > 0 {
						s.Min = ms(g.bounds[i-1])
					}
					break
				}
			}
			s.Max = upper(g.cnt - 1)
			for i, q := range [...]float64{0.5, 0.95, 0.99, 0.999} {
				s.Pct[i] = upper(uint64(math.Ceil(q*float64(g.cnt))) - 1)
			}
		}
		out[name] = s
	}
	return out
}

// histogramCount is how many observations h has had.
func histogramCount(h prometheus.Histogram) uint64 {
	var d dto.Metric
	if h.Write(&d) != nil {
		return 0
	}
	return d.GetHistogram().GetSampleCount()
}
