package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/state"
)

// The watch loops of a job: the requests under triggers/ (trigger,
// backfill, retry) and the hosts under hosts/ (firings lost with theirs).

// watchRequests takes the job's requests (trigger, backfill, retry) as
// they come. Deleting a request is the claim: of the hosts that see it,
// the one whose delete succeeds runs its firings, in order, one at a
// time. A retry is left in place until it is due, so that a host that
// dies during the backoff takes no retry with it.
func (h *cronHost) watchRequests(loop, ctx context.Context, j *CronJob, runs *sync.WaitGroup) {
	p := h.paths(j)
	h.eachChange(loop, p.Triggers(), nil, func(kids []string) {
		slices.Sort(kids)
		for _, k := range kids {
			h.takeRequest(loop, ctx, j, k, runs)
		}
	})
}

// takeRequest tries to take the request named k under the job's
// triggers/ and serves it; a retry not yet due is tried again when it is.
func (h *cronHost) takeRequest(loop, ctx context.Context, j *CronJob, k string, runs *sync.WaitGroup) {
	node := h.paths(j).Trigger(k)
	b, st, err := h.s.conn.Get(loop, node)
	if err != nil {
		return
	}
	var req state.CronRequest
	bad := json.Unmarshal(b, &req) != nil
	if due := state.RetryDue(req, h.now()); !bad && due > 0 {
		h.mu.Lock()
		waiting := h.dueLater[node]
		h.dueLater[node] = true
		h.mu.Unlock()
		if waiting {
			return
		}
		runs.Add(1)
		go func() {
			defer runs.Done()
			t := time.NewTimer(due)
			defer t.Stop()
			select {
			case <-loop.Done():
			case <-t.C:
			}
			h.mu.Lock()
			delete(h.dueLater, node)
			h.mu.Unlock()
			if loop.Err() == nil {
				h.takeRequest(loop, ctx, j, k, runs)
			}
		}()
		return
	}
	if h.s.conn.Delete(loop, node, st.Version) != nil {
		return // another host took it
	}
	if bad {
		h.s.log.Warn("unreadable cron request dropped", "job", j.Name, "node", node)
		return
	}
	seq := strings.TrimPrefix(k, state.TriggerPrefix)
	runs.Add(1)
	if req.Kind == state.RequestRetry {
		go func() { defer runs.Done(); h.serveRetry(ctx, j, req) }()
		return
	}
	go func() { defer runs.Done(); h.serveRequest(ctx, j, req, seq) }()
}

// eachChange calls fn with dir's children, then again after every change
// to them, until loop ends. A read that fails is tried again a second
// later (a lost connection comes back, or ends the session and with it
// the cron process); onErr, when set, hears of the failures that are not
// a lost connection.
func (h *cronHost) eachChange(loop context.Context, dir string, onErr func(error), fn func([]string)) {
	for loop.Err() == nil {
		kids, ev, err := h.s.conn.ChildrenW(loop, dir)
		if err != nil {
			if onErr != nil && loop.Err() == nil && !errors.Is(err, engine.ErrUnreachable) {
				onErr(err)
			}
			t := time.NewTimer(time.Second)
			select {
			case <-loop.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		fn(kids)
		select {
		case <-loop.Done():
		case <-ev:
		}
	}
}

// serveRequest runs the firings of a trigger or backfill this host took,
// oldest first, each after the previous one ended.
func (h *cronHost) serveRequest(ctx context.Context, j *CronJob, req state.CronRequest, seq string) {
	for _, f := range state.Plan(req, seq) {
		if ctx.Err() != nil {
			return
		}
		node := h.paths(j).FiringNamed(f.Name)
		rec, v, won := h.claim(ctx, j, node, f.At, f.Reason)
		if won {
			h.runClaimed(ctx, j, node, &rec, v)
		}
	}
}

// serveRetry runs a failed firing again once its backoff has passed, if
// its record still says it failed at the attempt the request names; the
// write that claims the retry is conditional on the record's version.
func (h *cronHost) serveRetry(ctx context.Context, j *CronJob, req state.CronRequest) {
	if d := state.RetryDue(req, h.now()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	node := h.paths(j).FiringNamed(req.Firing)
	var rec state.FiringRecord
	var st engine.Stat
	for {
		b, s, ev, err := h.s.conn.GetW(ctx, node)
		if err != nil || json.Unmarshal(b, &rec) != nil {
			return
		}
		st = s
		if !state.RetryAwaitsRecord(rec, req) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-ev:
		}
	}
	step, ok := state.RetryFailed(rec, req, h.claimant(j), h.now())
	if !ok {
		return
	}
	nb, _ := json.Marshal(step.Rec)
	nst, err := h.s.conn.Update(ctx, node, nb, st.Version)
	if err != nil {
		return
	}
	if h.o.Metrics != nil {
		h.o.Metrics.retried(j.Name)
	}
	h.runClaimed(ctx, j, node, &step.Rec, nst.Version)
}

// watchLosses notices the firings of j lost with their host: a record
// that says claimed or running while the host record it names is gone
// (its session ended). It looks whenever the set of hosts changes, and
// once at start for losses no host was there to see.
func (h *cronHost) watchLosses(loop, ctx context.Context, j *CronJob, runs *sync.WaitGroup) {
	h.eachChange(loop, h.paths(j).Hosts(),
		func(err error) { h.s.log.Warn("cannot watch the job's hosts", "job", j.Name, "err", err) },
		func(live []string) { h.scanLosses(loop, ctx, j, live, runs) })
}

// scanLosses records each firing of j whose claimant is not among live
// hosts. The first host to write it (a write conditional on the record's
// version, so exactly one does) claims the firing again when retry-lost
// allows another run, and runs it; otherwise it records the firing lost.
func (h *cronHost) scanLosses(loop, ctx context.Context, j *CronJob, live []string, runs *sync.WaitGroup) {
	p := h.paths(j)
	kids, err := h.s.conn.Children(loop, p.Firings())
	if err != nil {
		return
	}
	alive := func(n string) bool { return slices.Contains(live, n) }
	for _, k := range kids {
		node := p.FiringNamed(k)
		b, st, err := h.s.conn.Get(loop, node)
		if err != nil {
			continue
		}
		var rec state.FiringRecord
		if json.Unmarshal(b, &rec) != nil || !state.LostWithHost(rec, alive) {
			continue
		}
		step, ok := state.LoseWithHost(rec, h.claimant(j), h.isStopping(), h.now(), j.rules())
		if !ok {
			// Left to a host that will run it: this one starts no job,
			// and would record the retry lost at once. With no host
			// left, the next to start finds it.
			continue
		}
		nb, _ := json.Marshal(step.Rec)
		nst, err := h.s.conn.Update(loop, node, nb, st.Version)
		if err != nil {
			// ErrVersion: another host recorded it first.
			continue
		}
		if !step.Run {
			// Its end line says lost, with the host it was lost with.
			h.ended(j, step.Rec)
			continue
		}
		h.s.log.Warn("firing lost with its host; running it again here", "job", j.Name, "scheduled", rec.Scheduled.Format(time.RFC3339),
			"host", rec.Host, "pid", rec.PID, "attempt", rec.Attempts())
		if h.o.Metrics != nil {
			h.o.Metrics.retried(j.Name)
		}
		next := step.Rec
		runs.Add(1)
		go func() { defer runs.Done(); h.runClaimed(ctx, j, node, &next, nst.Version) }()
	}
}
