package ensemble

import (
	"context"
	"errors"
	"math"

	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// pageSource is the member as its status page (statuspage) reads it.
type pageSource struct{ m *Member }

var _ statuspage.Source = pageSource{}

func (s pageSource) ID() string { return s.m.cfg.ID }

// Warning is the page's banner for a member running its peer port open.
func (s pageSource) Warning() string {
	if s.m.InsecurePeers() {
		return "The peer port is unauthenticated (--insecure-peers): anyone who reaches " + s.m.cfg.PeerAddr + " can act as a member."
	}
	return ""
}

func (s pageSource) Ensemble(ctx context.Context) []statuspage.MemberReport {
	st := s.m.ensembleStatus(ctx)
	out := make([]statuspage.MemberReport, 0, len(st.Members))
	for _, ms := range st.Members {
		out = append(out, statuspage.MemberReport{
			ID: ms.ID, Role: ms.State, Leader: ms.Leader, Term: ms.Term,
			CommitIndex: ms.CommitIndex, AppliedIndex: ms.AppliedIndex,
			ClientAddr: ms.ClientAddr, PeerAddr: ms.PeerAddr, Started: ms.Started,
			Sessions: ms.Sessions, Znodes: ms.Znodes, Error: ms.Error, Alarms: ms.Alarms,
		})
	}
	return out
}

func (s pageSource) Counters() statuspage.Counters {
	m := s.m
	nodes, _, _ := m.counts()
	return statuspage.Counters{
		Sessions: m.track.count(),
		Znodes:   nodes,
		Watches:  m.watch.count(),
		Requests: latencyCount(m.stats.latency),
		Latency:  latencyBuckets(m.stats.latency),
	}
}

// latencyBuckets sums the request latency histogram over every opcode.
func latencyBuckets(h *prometheus.HistogramVec) []statuspage.Bucket {
	var out []statuspage.Bucket
	forEachHistogram(h, func(hist *dto.Histogram) {
		if out == nil {
			for _, b := range hist.GetBucket() {
				out = append(out, statuspage.Bucket{Le: b.GetUpperBound()})
			}
			out = append(out, statuspage.Bucket{Le: math.Inf(1)})
		}
		for i, b := range hist.GetBucket() {
			if i < len(out)-1 {
				out[i].Count += b.GetCumulativeCount()
			}
		}
		out[len(out)-1].Count += hist.GetSampleCount()
	})
	return out
}

func latencyCount(h *prometheus.HistogramVec) int64 {
	var n uint64
	forEachHistogram(h, func(hist *dto.Histogram) { n += hist.GetSampleCount() })
	return int64(n)
}

// forEachHistogram hands fn the current reading of each of h's series.
// There is one series per opcode name (wire.OpName: a few dozen, any
// other op is "unknown"), so a buffer of maxOpSeries takes them all
// without a goroutine to drain it.
func forEachHistogram(h *prometheus.HistogramVec, fn func(*dto.Histogram)) {
	ch := make(chan prometheus.Metric, maxOpSeries)
	h.Collect(ch)
	close(ch)
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) == nil && d.GetHistogram() != nil {
			fn(d.GetHistogram())
		}
	}
}

func (s pageSource) ReadTree(fn func(statuspage.Tree)) {
	s.m.fsm.view(func(t *tree.Tree, _ int64) { fn(pageTree{t}) })
}

func (s pageSource) Session(id int64) statuspage.SessionState {
	if !s.m.IsLeader() {
		return statuspage.SessionState{}
	}
	silent, timeout, ok := s.m.track.silence(id)
	return statuspage.SessionState{Tracked: ok, Silent: silent, Timeout: timeout}
}

const maxOpSeries = 128

// pageTree reads the tree with no identity: only world:anyone entries
// grant anything, whoever views the page.
type pageTree struct{ t *tree.Tree }

func (p pageTree) Get(path string) ([]byte, statuspage.Stat, error) {
	data, st, err := p.t.Get(path, nil)
	return data, pageStat(st), pageErr(err)
}

func (p pageTree) FirstChildren(path string, n int, cmp func(a, b string) int) ([]string, statuspage.Stat, error) {
	kids, st, err := p.t.FirstChildren(path, nil, n, cmp)
	return kids, pageStat(st), pageErr(err)
}

func (p pageTree) Exists(path string) (statuspage.Stat, error) {
	st, err := p.t.Exists(path)
	return pageStat(st), pageErr(err)
}

func (p pageTree) ACL(path string) ([]statuspage.ACL, error) {
	acl, _, err := p.t.GetACL(path, nil)
	if err != nil {
		return nil, pageErr(err)
	}
	out := make([]statuspage.ACL, 0, len(acl))
	for _, a := range acl {
		out = append(out, statuspage.ACL{Perms: a.Perms, Scheme: a.Scheme, ID: a.ID})
	}
	return out, nil
}

func (p pageTree) SessionLive(id int64) bool {
	_, ok := p.t.Session(id)
	return ok
}

func pageStat(st tree.Stat) statuspage.Stat {
	return statuspage.Stat{
		Czxid: st.Czxid, Mzxid: st.Mzxid, Pzxid: st.Pzxid, Ctime: st.Ctime, Mtime: st.Mtime,
		Version: st.Version, Cversion: st.Cversion, Aversion: st.Aversion,
		EphemeralOwner: st.EphemeralOwner, DataLength: st.DataLength, NumChildren: st.NumChildren,
	}
}

func pageErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tree.ErrNoNode):
		return statuspage.ErrNoNode
	case errors.Is(err, tree.ErrNoAuth):
		return statuspage.ErrNoAuth
	}
	return err
}
