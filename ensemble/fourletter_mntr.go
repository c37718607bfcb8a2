package ensemble

// mntr, in ZooKeeper 3.8's layout: fourletter.go's longest word, kept in a
// file of its own.

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// mntr is ZooKeeper 3.8's mntr for the member's role: its keys in its
// order, then coordrun's own.
//
// Values come from the member's state where coordrun has the quantity;
// the rest carry what an idle ZooKeeper shows (0, or -1 for sizes never
// measured). Those that coordrun does not keep:
//
//   - gauges: min/max/last_proposal_size, last/min/max_client_response_size,
//     non_mtls_remote/local_conn_count, connection_drop_probability,
//     auth_failed_count, local_sessions (coordrun has none),
//     outstanding_tls_handshake, pending_syncs (syncs are answered
//     from raft's read index, not queued on the leader),
//     leader_uptime (the member does not record when it took the lead),
//     synced_non_voting_followers (raft non-voters count as observers);
//   - every counter but proposal_count, bytes_received_count and
//     response_bytes (coordrun's counts bytes sent in all, notifications
//     and framing included);
//   - every summary but readlatency and updatelatency;
//   - the learner_handler_qp_size and learner_handler_qp_time_ms sets,
//     printed once per follower, as a leader prints them.
//
// A summary prints avg (a Java double), min, max, cnt, sum, and for
// ZooKeeper's percentile summaries p50, p95, p99 and p999. The
// per-namespace and ack_latency sets, which ZooKeeper fills as requests
// arrive, coordrun does not keep at all.
func (m *Member) mntr() string {
	mode := m.mode()
	role := roleStandalone
	switch mode {
	case "leader":
		role = roleLeader
	case "follower":
		role = roleFollower
	}
	v := m.mntrValues(mode, role)
	sums := m.latencySummaries()

	var b strings.Builder
	line := func(k, val string) {
		b.WriteString("zk_")
		b.WriteString(k)
		b.WriteByte('\t')
		b.WriteString(val)
		b.WriteByte('\n')
	}
	for _, g := range mntrGauges {
		k, only, _ := strings.Cut(g, ":")
		if (only == "q" && role == roleStandalone) || (only == "l" && role != roleLeader) {
			continue
		}
		val, ok := v[k]
		if !ok {
			val = mntrIdle(k)
		}
		line(k, val)
	}
	summary := func(name string, s zkSummary, percentiles bool) {
		line("avg_"+name, javaDouble(s.avg()))
		line("min_"+name, strconv.FormatInt(s.min, 10))
		line("max_"+name, strconv.FormatInt(s.max, 10))
		line("cnt_"+name, strconv.FormatInt(s.cnt, 10))
		line("sum_"+name, strconv.FormatInt(s.sum, 10))
		if percentiles {
			for i, p := range [...]string{"p50", "p95", "p99", "p999"} {
				line(p+"_"+name, strconv.FormatInt(s.pct[i], 10))
			}
		}
	}
	for _, name := range mntrSummaries {
		summary(name, sums[name], false)
	}
	for _, name := range mntrPercentileSummaries {
		summary(name, sums[name], true)
	}
	var followers []string
	if role == roleLeader {
		followers = m.followerIDs()
	}
	for _, id := range followers {
		summary(id+"_learner_handler_qp_size", zkSummary{}, false)
	}
	for _, id := range followers {
		summary(id+"_learner_handler_qp_time_ms", zkSummary{}, true)
	}

	// coordrun's own, after ZooKeeper's: zk_last_zxid and zk_followers
	// (ZooKeeper 3.4's name for the leader's learners, which older
	// checks read) and the watch events sent.
	line("last_zxid", strconv.FormatInt(m.fsm.lastZxid(), 10))
	if role == roleLeader {
		line("followers", v["learners"])
	}
	b.WriteString("coordrun_watch_notifications\t")
	b.WriteString(strconv.FormatInt(m.stats.notifications.Load(), 10))
	b.WriteByte('\n')
	return b.String()
}

type mntrRole int

const (
	roleStandalone mntrRole = iota
	roleLeader
	roleFollower
)

// mntrGauges are the keys ZooKeeper 3.8's mntr prints before its
// summaries, without "zk_", in its order (that of its metrics registry):
// ":q" marks a key only members of a quorum print, ":l" one only the
// leader prints. Simple checks read mntr's first 2 KiB only, so the
// order decides what they see.
var mntrGauges = strings.Fields(`
	version server_state peer_state:q ephemerals_count num_alive_connections
	avg_latency min_proposal_size:l outstanding_requests znode_count
	global_sessions non_mtls_remote_conn_count last_client_response_size
	packets_sent packets_received max_proposal_size:l max_client_response_size
	synced_followers:l connection_drop_probability watch_count
	synced_non_voting_followers:l synced_observers:l auth_failed_count
	min_latency max_file_descriptor_count approximate_data_size
	open_file_descriptor_count last_proposal_size:l pending_syncs:l
	leader_uptime:l local_sessions uptime max_latency outstanding_tls_handshake
	learners:l min_client_response_size non_mtls_local_conn_count quorum_size:q
	proposal_count watch_bytes outstanding_changes_removed throttled_ops
	stale_requests_dropped large_requests_rejected insecure_admin_count
	connection_rejected cnxn_closed_without_zk_server_running
	sessionless_connections_expired looking_count dead_watchers_queued
	stale_requests connection_drop_count learner_proposal_received_count
	digest_mismatches_count dead_watchers_cleared response_packet_cache_hits
	bytes_received_count add_dead_watcher_stall_time request_throttle_wait_count
	requests_not_forwarded_to_commit_processor response_packet_cache_misses
	ensemble_auth_success prep_processor_request_queued
	learner_commit_received_count stale_replies connection_request_count
	response_bytes ensemble_auth_fail diff_count
	response_packet_get_children_cache_misses connection_revalidate_count
	quit_leading_due_to_disloyal_voter snap_count unrecoverable_error_count
	unsuccessful_handshake commit_count stale_sessions_expired
	response_packet_get_children_cache_hits sync_processor_request_queued
	outstanding_changes_queued request_commit_queued ensemble_auth_skip
	skip_learner_request_to_next_processor_count tls_handshake_exceeded
	revalidate_count
`)

// mntrSummaries (avg, min, max, cnt, sum) and mntrPercentileSummaries
// (those and p50 to p999) follow the gauges, in ZooKeeper's order.
var mntrSummaries = strings.Fields(`
	socket_closing_time proposal_process_time leader_unavailable_time
	node_created_watch_count session_queues_drained write_commit_proc_req_queued
	connection_token_deficit read_commit_proc_req_queued node_deleted_watch_count
	startup_txns_load_time sync_processor_queue_size follower_sync_time
	prep_processor_queue_size fsynctime inflight_snap_count
	reads_issued_from_session_queue learner_request_processor_queue_size
	snapshottime unavailable_time startup_txns_loaded
	reads_after_write_in_session_queue requests_in_session_queue
	write_commit_proc_issued prep_process_time pending_session_queue_size
	time_waiting_empty_pool_in_commit_processor_read_ms commit_process_time
	dbinittime inflight_diff_count netty_queued_buffer_capacity election_time
	commit_commit_proc_req_queued sync_processor_batch_size
	node_children_watch_count write_batch_time_in_commit_processor
	read_commit_proc_issued concurrent_request_processing_in_commit_processor
	observer_sync_time node_changed_watch_count sync_process_time
	startup_snap_load_time
`)

var mntrPercentileSummaries = strings.Fields(`
	prep_processor_queue_time_ms jvm_pause_time_ms close_session_prep_time
	read_commitproc_time_ms updatelatency local_write_committed_time_ms
	request_throttle_queue_time_ms readlatency quorum_ack_latency
	om_commit_process_time_ms read_final_proc_time_ms commit_propagation_latency
	dead_watchers_cleaner_latency write_final_proc_time_ms
	proposal_ack_creation_latency proposal_latency om_proposal_process_time_ms
	sync_processor_queue_and_flush_time_ms propagation_latency
	server_write_committed_time_ms sync_processor_queue_time_ms
	sync_processor_queue_flush_time_ms write_commitproc_time_ms
`)

// mntrIdle is what an idle ZooKeeper shows for a key coordrun does not
// keep: -1 for sizes never measured, 0.0 for a probability, else 0.
func mntrIdle(key string) string {
	switch key {
	case "min_proposal_size", "max_proposal_size", "last_proposal_size",
		"last_client_response_size", "min_client_response_size", "max_client_response_size":
		return "-1"
	case "connection_drop_probability":
		return "0.0"
	}
	return "0"
}

// mntrValues are the gauges and counters coordrun has, by mntr key.
func (m *Member) mntrValues(mode string, role mntrRole) map[string]string {
	lmin, lavg, lmax := m.latencyFigures()
	nodes, eph, size := m.counts()
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	v := map[string]string{
		"version":                    fullVersion(),
		"server_state":               mode,
		"ephemerals_count":           strconv.Itoa(eph),
		"num_alive_connections":      i64(m.stats.connections.Load()),
		"avg_latency":                lavg,
		"min_latency":                i64(lmin),
		"max_latency":                i64(lmax),
		"outstanding_requests":       i64(m.stats.outstanding.Load()),
		"znode_count":                strconv.Itoa(nodes),
		"global_sessions":            strconv.Itoa(m.track.count()),
		"packets_sent":               i64(m.stats.sent.Load()),
		"packets_received":           i64(m.stats.received.Load()),
		"watch_count":                strconv.Itoa(m.watch.count()),
		"approximate_data_size":      i64(size),
		"open_file_descriptor_count": strconv.Itoa(openFileDescriptors()),
		"max_file_descriptor_count":  i64(maxFileDescriptors()),
		"uptime":                     i64(time.Since(processStart).Milliseconds()),
		"proposal_count":             i64(int64(histogramCount(m.stats.grouped))),
		"bytes_received_count":       i64(m.stats.bytesIn.Load()),
		"response_bytes":             i64(m.stats.bytesOut.Load()),
	}
	if role == roleStandalone {
		return v
	}
	var servers []raft.Server
	if cf := m.raft.GetConfiguration(); cf.Error() == nil {
		servers = cf.Configuration().Servers
	}
	voters := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	v["quorum_size"] = strconv.Itoa(voters)
	v["peer_state"] = "following - broadcast"
	if role == roleLeader {
		v["peer_state"] = "leading - broadcast"
		learners, synced, observers := m.followerSync(servers)
		v["learners"] = strconv.Itoa(learners)
		v["synced_followers"] = strconv.Itoa(synced)
		v["synced_observers"] = strconv.Itoa(observers)
	}
	return v
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

// zkSummary is one of ZooKeeper's summaries in whole milliseconds (or
// units): count, sum, bounds and the p50, p95, p99 and p999 percentiles.
type zkSummary struct {
	cnt, sum, min, max int64
	pct                [4]int64
	sumExact           float64 // the sum before rounding, for the average
}

func (s zkSummary) avg() float64 {
	if s.cnt == 0 {
		return 0
	}
	return s.sumExact / float64(s.cnt)
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
func (m *Member) latencySummaries() map[string]zkSummary {
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
	out := map[string]zkSummary{}
	for name, g := range groups {
		s := zkSummary{cnt: int64(g.cnt), sumExact: g.sum * 1e3, sum: int64(math.Round(g.sum * 1e3))}
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
						s.min = ms(g.bounds[i-1])
					}
					break
				}
			}
			s.max = upper(g.cnt - 1)
			for i, q := range [...]float64{0.5, 0.95, 0.99, 0.999} {
				s.pct[i] = upper(uint64(math.Ceil(q*float64(g.cnt))) - 1)
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
