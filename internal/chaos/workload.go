package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Paths of the workload.
const (
	root       = "/chaos"
	regDir     = root + "/reg" // registers: set, cas, get, sync+get
	durDir     = root + "/dur" // create-only nodes: durability, exists watches
	ephDir     = root + "/eph" // one ephemeral per workload session
	initialVal = "init"
)

var openACL = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}}

// workload drives sessions against the cluster and records the history.
type workload struct {
	c         *Cluster
	h         *History
	start     time.Time
	keys      []string      // every register
	epochKeys [][]string    // the registers in use during each keyEpoch
	timeout   time.Duration // requested session timeout
	opWait    time.Duration // how long a reply may take before it counts as lost

	nextSession atomic.Int64
	nextDur     []atomic.Int64 // per worker: index of its next durable node
	stop        chan struct{}
	wg          sync.WaitGroup

	mu        sync.Mutex
	survivors []*session // watcher sessions alive at the end, for the final probe
	abandoned atomic.Int64
}

func (w *workload) now() int64 { return int64(time.Since(w.start)) }

// keyEpoch is how long one set of registers is in use.
const keyEpoch = 5 * time.Second

// key picks a register of the current epoch.
func (w *workload) key(rng *rand.Rand) string {
	e := min(int(time.Since(w.start)/keyEpoch), len(w.epochKeys)-1)
	ks := w.epochKeys[e]
	return ks[rng.IntN(len(ks))]
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// open starts a session on a random member (through its client proxy)
// and gives it its ephemeral node.
func (w *workload) open(rng *rand.Rand) *session {
	for !w.stopped() {
		n := int(w.nextSession.Add(1))
		ctx, cancel := context.WithTimeout(context.Background(), w.opWait)
		s, err := dialSession(ctx, n, w.c.ClientAddr(rng.IntN(w.c.N())), w.timeout)
		cancel()
		if err == nil {
			c := s.send(wire.OpCreate, &wire.CreateRequest{Path: fmt.Sprintf("%s/s%d", ephDir, n), ACL: openACL, Flags: wire.FlagEphemeral}, &wire.CreateResponse{})
			if s.wait(c, w.opWait) == nil {
				return s
			}
			w.retire(s, false)
		}
		time.Sleep(50 * time.Millisecond) // pacing reconnect attempts
	}
	return nil
}

// retire records a session that ended; one that did not survive is
// abandoned, never closed, so its session must expire.
func (w *workload) retire(s *session, survived bool) {
	if !survived {
		s.abandon()
		w.abandoned.Add(1)
	}
	w.h.addSession(s, survived)
}

func (w *workload) outcome(err error) (string, string) {
	var code wire.Code
	switch {
	case err == nil:
		return OK, ""
	case errors.As(err, &code) && code == wire.ErrBadVersion:
		return BadVersion, ""
	case errors.As(err, &code) && code == wire.ErrNoNode:
		return Failed, err.Error()
	}
	return Unknown, err.Error()
}

// worker runs one client: one session at a time, ops one after another
// except sync+get and write+read pairs, which are pipelined.
func (w *workload) worker(id int, seed uint64) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	var s *session
	versions := map[string]int32{}
	for !w.stopped() {
		if s == nil || s.lost() {
			if s != nil {
				w.retire(s, false)
			}
			if s = w.open(rng); s == nil {
				return
			}
		}
		key := w.key(rng)
		switch r := rng.IntN(100); {
		case r < 30:
			w.get(s, key, versions)
		case r < 50:
			w.syncGet(s, key, versions)
		case r < 68:
			w.write(s, key, -1, fmt.Sprintf("s%d-%d", s.n, rng.Uint32()), versions, false)
		case r < 88:
			exp := versions[key]
			if rng.IntN(4) == 0 {
				exp = int32(rng.IntN(int(exp) + 2))
			}
			w.write(s, key, exp, fmt.Sprintf("s%d-%d", s.n, rng.Uint32()), versions, false)
		case r < 94:
			w.write(s, key, -1, fmt.Sprintf("s%d-%d", s.n, rng.Uint32()), versions, true)
		case r < 99:
			w.create(s, id)
		default:
			// Walk away from the session: its ephemeral must go.
			w.retire(s, false)
			s = nil
		}
		time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond) // load pacing
	}
	if s != nil {
		if s.lost() || s.closeSession() != nil {
			w.retire(s, false)
		} else {
			w.retire(s, true)
		}
	}
}

func (w *workload) get(s *session, key string, versions map[string]int32) {
	op := Op{Session: s.n, Kind: OpGet, Key: key, Call: w.now()}
	var resp wire.GetDataResponse
	c := s.send(wire.OpGetData, &wire.PathWatchRequest{Path: key}, &resp)
	w.finishRead(s, &op, c, &resp, versions)
}

func (w *workload) syncGet(s *session, key string, versions map[string]int32) {
	op := Op{Session: s.n, Kind: OpSyncGet, Key: key, Call: w.now()}
	sc := s.send(wire.OpSync, &wire.PathRequest{Path: key}, &wire.SyncResponse{})
	var resp wire.GetDataResponse
	c := s.send(wire.OpGetData, &wire.PathWatchRequest{Path: key}, &resp)
	if err := s.wait(sc, w.opWait); err != nil {
		_ = s.wait(c, w.opWait)
		op.Return, op.Outcome, op.Err = w.now(), Failed, "sync: "+err.Error()
		w.h.addOp(op)
		return
	}
	w.finishRead(s, &op, c, &resp, versions)
}

func (w *workload) finishRead(s *session, op *Op, c *call, resp *wire.GetDataResponse, versions map[string]int32) {
	err := s.wait(c, w.opWait)
	op.Return = w.now()
	if err != nil {
		// A read that did not return tells nothing.
		op.Outcome, op.Err = Failed, err.Error()
		w.h.addOp(*op)
		return
	}
	op.Outcome, op.Got, op.Version, op.Mzxid, op.Zxid, op.Seq = OK, string(resp.Data), resp.Stat.Version, resp.Stat.Mzxid, c.hdr.Zxid, c.seq
	versions[op.Key] = max(versions[op.Key], op.Version)
	w.h.addOp(*op)
}

// write is setData (version -1: blind, else cas); with readBack a plain
// getData follows in the same pipeline, which must see the write.
func (w *workload) write(s *session, key string, version int32, val string, versions map[string]int32, readBack bool) {
	kind := OpSet
	if version >= 0 {
		kind = OpCAS
	}
	op := Op{Session: s.n, Kind: kind, Key: key, Value: val, Expect: version, Call: w.now()}
	var resp wire.StatResponse
	c := s.send(wire.OpSetData, &wire.SetDataRequest{Path: key, Data: []byte(val), Version: version}, &resp)
	var rb *call
	var rbResp wire.GetDataResponse
	var rbOp Op
	if readBack {
		rbOp = Op{Session: s.n, Kind: OpGet, Key: key, Call: w.now()}
		rb = s.send(wire.OpGetData, &wire.PathWatchRequest{Path: key}, &rbResp)
	}
	err := s.wait(c, w.opWait)
	op.Outcome, op.Err = w.outcome(err)
	if op.Outcome == Unknown {
		op.Return = -1
	} else {
		op.Return = w.now()
		op.Seq, op.Zxid = c.seq, c.hdr.Zxid
	}
	if op.Outcome == OK {
		op.Version, op.Mzxid = resp.Stat.Version, resp.Stat.Mzxid
		versions[key] = max(versions[key], op.Version)
	}
	w.h.addOp(op)
	if rb != nil {
		w.finishRead(s, &rbOp, rb, &rbResp, versions)
	}
}

func (w *workload) create(s *session, worker int) {
	path := fmt.Sprintf("%s/w%d-%d", durDir, worker, w.nextDur[worker].Add(1)-1)
	op := Op{Session: s.n, Kind: OpCreate, Key: path, Value: "d", Call: w.now()}
	c := s.send(wire.OpCreate, &wire.CreateRequest{Path: path, Data: []byte("d"), ACL: openACL}, &wire.CreateResponse{})
	err := s.wait(c, w.opWait)
	op.Outcome, op.Err = w.outcome(err)
	op.Return = w.now()
	if op.Outcome == Unknown {
		op.Return = -1
	} else {
		op.Seq, op.Zxid = c.seq, c.hdr.Zxid
	}
	w.h.addOp(op)
}

// watcher keeps getData watches on the registers and exists watches on
// durable nodes a worker will create next, re-arming after each event.
func (w *workload) watcher(id int, seed uint64, workers int) {
	defer w.wg.Done()
	rng := rand.New(rand.NewPCG(seed, uint64(1000+id)))
	var s *session
	armed := map[string]bool{}
	seen := 0
	for !w.stopped() {
		if s == nil || s.lost() {
			if s != nil {
				w.retire(s, false)
			}
			if s = w.open(rng); s == nil {
				return
			}
			armed, seen = map[string]bool{}, 0
		}
		_, events := s.record()
		for _, ev := range events[seen:] {
			delete(armed, ev.Path)
		}
		seen = len(events)
		if rng.IntN(3) == 0 {
			wk := rng.IntN(workers)
			path := fmt.Sprintf("%s/w%d-%d", durDir, wk, w.nextDur[wk].Load()+int64(rng.IntN(3)))
			if !armed[path] {
				var resp wire.StatResponse
				c := s.send(wire.OpExists, &wire.PathWatchRequest{Path: path, Watch: true}, &resp)
				err := s.wait(c, w.opWait)
				var code wire.Code
				if errors.As(err, &code) && code == wire.ErrNoNode {
					armed[path] = true
					w.h.addArm(Arm{Session: s.n, Path: path, Kind: "exist", Seq: c.seq, ReplyZxid: c.hdr.Zxid})
				}
				// An existing node got a data watch; the runs keeps
				// it simple and never arms those on durable nodes
				// again, but the watch is real, so record it.
				if err == nil {
					armed[path] = true
					w.h.addArm(Arm{Session: s.n, Path: path, Kind: "data", Seq: c.seq, ReplyZxid: c.hdr.Zxid})
				}
			}
		} else {
			key := w.key(rng)
			if !armed[key] {
				var resp wire.GetDataResponse
				c := s.send(wire.OpGetData, &wire.PathWatchRequest{Path: key, Watch: true}, &resp)
				if s.wait(c, w.opWait) == nil {
					armed[key] = true
					w.h.addArm(Arm{Session: s.n, Path: key, Kind: "data", Seq: c.seq, ReplyZxid: c.hdr.Zxid})
				}
			}
		}
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond) // pacing
	}
	if s != nil && !s.lost() {
		w.mu.Lock()
		w.survivors = append(w.survivors, s)
		w.mu.Unlock()
	} else if s != nil {
		w.retire(s, false)
	}
}

// probe gives each surviving watcher session its final sync+read of every
// path it has a watch on, then closes it.
func (w *workload) probe() {
	w.mu.Lock()
	survivors := w.survivors
	w.survivors = nil
	w.mu.Unlock()
	paths := map[int][]string{}
	w.h.mu.Lock()
	for _, a := range w.h.Arms {
		if !slices.Contains(paths[a.Session], a.Path) {
			paths[a.Session] = append(paths[a.Session], a.Path)
		}
	}
	w.h.mu.Unlock()
	for _, s := range survivors {
		ok := true
		for _, p := range paths[s.n] {
			sc := s.send(wire.OpSync, &wire.PathRequest{Path: p}, &wire.SyncResponse{})
			var resp wire.StatResponse
			c := s.send(wire.OpExists, &wire.PathWatchRequest{Path: p}, &resp)
			err1 := s.wait(sc, w.opWait)
			err2 := s.wait(c, w.opWait)
			var code wire.Code
			switch {
			case err1 == nil && err2 == nil:
				z := resp.Stat.Mzxid
				if strings.HasPrefix(p, durDir) {
					z = resp.Stat.Czxid
				}
				w.h.addProbe(Probe{Session: s.n, Path: p, Seq: c.seq, Mzxid: z})
			case err1 == nil && errors.As(err2, &code) && code == wire.ErrNoNode:
				w.h.addProbe(Probe{Session: s.n, Path: p, Seq: c.seq})
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		if ok && s.closeSession() == nil {
			w.retire(s, true)
		} else {
			w.retire(s, false)
		}
	}
}
