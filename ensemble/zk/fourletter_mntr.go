package zk

// mntr, in ZooKeeper 3.8's layout, rendered from MntrFigures.

import (
	"strconv"
	"strings"
)

// MntrFigures are what mntr reports: srvr's figures and more.
type MntrFigures struct {
	Figures
	Ephemerals              int
	Sessions                int
	Watches                 int
	DataSize                int64
	OpenFDs                 int
	MaxFDs                  int64
	UptimeMs                int64
	Proposals               int64
	BytesReceived, BytesOut int64
	Notifications           int64 // watch events sent: coordrun's own key
	// A member of a quorum (Mode leader or follower):
	QuorumSize int // voters
	// A leader: the other members answering, the voters and non-voters
	// among them that follow it, and the other members' ids in the
	// configuration's order.
	Learners, SyncedFollowers, SyncedObservers int
	Followers                                  []string
	// ReadLatency and UpdateLatency are ZooKeeper's readlatency and
	// updatelatency summaries.
	ReadLatency, UpdateLatency Summary
}

// Summary is one of ZooKeeper's summaries in whole milliseconds (or
// units): count, sum, bounds and the p50, p95, p99 and p999 percentiles.
type Summary struct {
	Cnt, Sum, Min, Max int64
	Pct                [4]int64
	SumExact           float64 // the sum before rounding, for the average
}

func (s Summary) avg() float64 {
	if s.Cnt == 0 {
		return 0
	}
	return s.SumExact / float64(s.Cnt)
}

type mntrRole int

const (
	roleStandalone mntrRole = iota
	roleLeader
	roleFollower
)

// Mntr is ZooKeeper 3.8's mntr for the member's role (from Mode): its keys
// in its order, then coordrun's own.
//
// Values come from the figures where coordrun has the quantity; the rest
// carry what an idle ZooKeeper shows (0, or -1 for sizes never measured).
// Those that coordrun does not keep:
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
func Mntr(f *MntrFigures) string {
	role := roleStandalone
	switch f.Mode {
	case "leader":
		role = roleLeader
	case "follower":
		role = roleFollower
	}
	v := mntrValues(f, role)
	sums := map[string]Summary{"readlatency": f.ReadLatency, "updatelatency": f.UpdateLatency}

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
	summary := func(name string, s Summary, percentiles bool) {
		line("avg_"+name, JavaDouble(s.avg()))
		line("min_"+name, strconv.FormatInt(s.Min, 10))
		line("max_"+name, strconv.FormatInt(s.Max, 10))
		line("cnt_"+name, strconv.FormatInt(s.Cnt, 10))
		line("sum_"+name, strconv.FormatInt(s.Sum, 10))
		if percentiles {
			for i, p := range [...]string{"p50", "p95", "p99", "p999"} {
				line(p+"_"+name, strconv.FormatInt(s.Pct[i], 10))
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
		followers = f.Followers
	}
	for _, id := range followers {
		summary(id+"_learner_handler_qp_size", Summary{}, false)
	}
	for _, id := range followers {
		summary(id+"_learner_handler_qp_time_ms", Summary{}, true)
	}

	// coordrun's own, after ZooKeeper's: zk_last_zxid and zk_followers
	// (ZooKeeper 3.4's name for the leader's learners, which older
	// checks read) and the watch events sent.
	line("last_zxid", strconv.FormatInt(f.Zxid, 10))
	if role == roleLeader {
		line("followers", v["learners"])
	}
	b.WriteString("coordrun_watch_notifications\t")
	b.WriteString(strconv.FormatInt(f.Notifications, 10))
	b.WriteByte('\n')
	return b.String()
}

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

// mntrValues are the gauges and counters the figures hold, by mntr key.
func mntrValues(f *MntrFigures, role mntrRole) map[string]string {
	lmin, lavg, lmax := latencies(&f.Figures)
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	v := map[string]string{
		"version":                    f.Version,
		"server_state":               f.Mode,
		"ephemerals_count":           strconv.Itoa(f.Ephemerals),
		"num_alive_connections":      i64(f.Connections),
		"avg_latency":                lavg,
		"min_latency":                i64(lmin),
		"max_latency":                i64(lmax),
		"outstanding_requests":       i64(f.Outstanding),
		"znode_count":                strconv.Itoa(f.Nodes),
		"global_sessions":            strconv.Itoa(f.Sessions),
		"packets_sent":               i64(f.Sent),
		"packets_received":           i64(f.Received),
		"watch_count":                strconv.Itoa(f.Watches),
		"approximate_data_size":      i64(f.DataSize),
		"open_file_descriptor_count": strconv.Itoa(f.OpenFDs),
		"max_file_descriptor_count":  i64(f.MaxFDs),
		"uptime":                     i64(f.UptimeMs),
		"proposal_count":             i64(f.Proposals),
		"bytes_received_count":       i64(f.BytesReceived),
		"response_bytes":             i64(f.BytesOut),
	}
	if role == roleStandalone {
		return v
	}
	v["quorum_size"] = strconv.Itoa(f.QuorumSize)
	v["peer_state"] = "following - broadcast"
	if role == roleLeader {
		v["peer_state"] = "leading - broadcast"
		v["learners"] = strconv.Itoa(f.Learners)
		v["synced_followers"] = strconv.Itoa(f.SyncedFollowers)
		v["synced_observers"] = strconv.Itoa(f.SyncedObservers)
	}
	return v
}
