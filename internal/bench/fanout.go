package main

// The fanout workload of -compare: -fanout-watchers sessions of the raw
// client (sessions.go), dealt over the members, each with a data watch on
// one znode; a go-zookeeper client on a follower sets it, -fanout-rounds
// times, each watcher arming its watch again after each notification. It
// reports, per round, the time from sending the setData to its reply and
// to the last watcher's notification, and from the reply to that last
// notification (ZooKeeper fires the watches before it replies).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/go-zookeeper/zk"
)

// fanoutResult is one fanout run.
type fanoutResult struct {
	System  string `json:"system"`
	Watches int    `json:"watchers"`
	Rounds  int    `json:"rounds"`
	// Medians over the rounds.
	ReplyMs       float64 `json:"set_to_reply_ms"`
	LastMs        float64 `json:"set_to_last_notification_ms"`
	ReplyToLastMs float64 `json:"reply_to_last_notification_ms"`
	Missing       int     `json:"missing_notifications"` // over all rounds
}

const fanoutPath = "/bench-fanout"

func runFanout(ctx context.Context, s *system, watchers, rounds int) (fanoutResult, error) {
	res := fanoutResult{System: s.name, Watches: watchers, Rounds: rounds}
	order := s.clientOrder()
	w, err := connect(ctx, order[0])
	if err != nil {
		return res, err
	}
	defer w.Close()
	if _, err := w.Create(fanoutPath, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		return res, err
	}
	var got atomic.Int64 // notifications this round
	all := make(chan struct{}, 1)
	arm := func(rs *rawSession, xid int32) error {
		return rs.sendBody(xid, wire.OpGetData, func(e *wire.Encoder) {
			(&wire.PathWatchRequest{Path: fanoutPath, Watch: true}).Encode(e)
		})
	}
	sess := make([]*rawSession, watchers)
	defer func() {
		for _, rs := range sess {
			if rs != nil {
				rs.nc.Close()
			}
		}
	}()
	if err := parallelLimit(watchers, 64, func(i int) error {
		rs, err := openRawSession(ctx, order[i%len(order)])
		if err != nil {
			return err
		}
		rs.notified = func() {
			if got.Add(1) == int64(watchers) {
				select {
				case all <- struct{}{}:
				default:
				}
			}
			_ = arm(rs, int32(i+1)) // for the next round
		}
		sess[i] = rs
		return arm(rs, int32(i+1))
	}); err != nil {
		return res, err
	}
	// Every watch is set once the members count them.
	if err := poll(ctx, 60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d watches on %s", watchers, s.name), func() (bool, error) {
		n, err := s.watchCount()
		return n >= watchers, err
	}); err != nil {
		return res, err
	}
	var replies, lasts, gaps []time.Duration
	var mu sync.Mutex
	for r := 0; r < rounds; r++ {
		got.Store(0)
		select {
		case <-all:
		default:
		}
		start := time.Now()
		if _, err := w.Set(fanoutPath, []byte{byte(r)}, -1); err != nil {
			return res, err
		}
		reply := time.Now()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
			res.Missing += watchers - int(got.Load())
			continue
		case <-ctx.Done():
			return res, ctx.Err()
		}
		last := time.Now()
		mu.Lock()
		replies = append(replies, reply.Sub(start))
		lasts = append(lasts, last.Sub(start))
		gaps = append(gaps, last.Sub(reply))
		mu.Unlock()
		// The watchers arm again; wait until the members count them all.
		if err := poll(ctx, 60*time.Second, 10*time.Millisecond, "watches armed again", func() (bool, error) {
			n, err := s.watchCount()
			return n >= watchers, err
		}); err != nil {
			return res, err
		}
	}
	med := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return ms(s[(len(s)-1)/2])
	}
	res.ReplyMs, res.LastMs, res.ReplyToLastMs = med(replies), med(lasts), med(gaps)
	return res, nil
}
