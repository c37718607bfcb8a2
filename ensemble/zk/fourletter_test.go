package zk_test

import (
	"strings"
	"testing"

	"github.com/coordrun/coordrun/ensemble/zk"
)

func TestJavaDouble(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0.0"}, {2.25, "2.25"}, {4.18181818, "4.1818"}, {1, "1.0"}, {0.001, "0.001"},
		{0.0001, "1.0E-4"}, {0.00004, "0.0"}, {12345678, "1.2345678E7"}, {-3.5, "-3.5"},
	} {
		if got := zk.JavaDouble(c.v); got != c.want {
			t.Errorf("JavaDouble(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

var figures = zk.Figures{
	Version:    "3.8.4-coordrun, built on 2026-12-03 10:00 UTC",
	LatencyMin: 0.4, LatencyAvg: 1.23456, LatencyMax: 7.2,
	Received: 25, Sent: 26, Connections: 2, Outstanding: 1, Zxid: 0x1f, Mode: "standalone", Nodes: 8,
}

func TestSrvr(t *testing.T) {
	const body = "Latency min/avg/max: 0/1.2346/8\nReceived: 25\nSent: 26\nConnections: 2\nOutstanding: 1\nZxid: 0x1f\n"
	leader := figures
	leader.Mode = "leader"
	for _, c := range []struct {
		name    string
		f       zk.Figures
		clients []zk.Client
		want    string
	}{
		{"srvr", figures, nil,
			"Zookeeper version: 3.8.4-coordrun, built on 2026-12-03 10:00 UTC\n" + body + "Mode: standalone\nNode count: 8\n"},
		{"a leader's srvr adds proposal sizes", leader, nil,
			"Zookeeper version: 3.8.4-coordrun, built on 2026-12-03 10:00 UTC\n" + body + "Mode: leader\nNode count: 8\n" +
				"Proposal sizes last/min/max: -1/-1/-1\n"},
		{"stat lists the clients sorted", figures, []zk.Client{
			{Remote: "127.0.0.1:58116", Recved: 1},
			{Remote: "127.0.0.1:58102", Established: true, Queued: 3},
		}, "Zookeeper version: 3.8.4-coordrun, built on 2026-12-03 10:00 UTC\nClients:\n" +
			" /127.0.0.1:58102[1](queued=3,recved=0,sent=0)\n /127.0.0.1:58116[0](queued=0,recved=1,sent=0)\n\n" +
			body + "Mode: standalone\nNode count: 8\n"},
		{"stat with no client still has its block", figures, []zk.Client{},
			"Zookeeper version: 3.8.4-coordrun, built on 2026-12-03 10:00 UTC\nClients:\n\n" + body + "Mode: standalone\nNode count: 8\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := zk.Srvr(&c.f, c.clients); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestEnvi(t *testing.T) {
	got := zk.Envi([][2]string{{"zookeeper.version", "3.8.4"}, {"user.dir", "/var/lib/coordrun"}})
	if want := "Environment:\nzookeeper.version=3.8.4\nuser.dir=/var/lib/coordrun\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestConf(t *testing.T) {
	const server = "clientPort=2181\nsecureClientPort=-1\ndataDir=/d\ndataDirSize=597\ndataLogDir=/d\ndataLogSize=597\n" +
		"maxClientCnxns=60\nminSessionTimeout=4000\nmaxSessionTimeout=40000\nclientPortListenBacklog=-1\nserverId=3\n"
	base := zk.ConfFigures{ClientPort: 2181, SecurePort: -1, DataDir: "/d", DataDirSize: 597, MaxClientConns: 60,
		MinSessionTimeoutMs: 4000, MaxSessionTimeoutMs: 40000, ServerID: "3"}
	quorum := base
	quorum.Quorum, quorum.QuorumPort = true, 2888
	quorum.Membership = []byte("server.3=127.0.0.1:2888:0:participant\nversion=100000002")
	observer := quorum
	observer.Observer = true
	for _, c := range []struct {
		name string
		f    zk.ConfFigures
		want string
	}{
		{"standalone", base, server},
		{"a member of a quorum, membership without a final newline", quorum, server +
			"electionPort=0\nquorumPort=2888\npeerType=0\nmembership: \nserver.3=127.0.0.1:2888:0:participant\nversion=100000002"},
		{"an observer", observer, server +
			"electionPort=0\nquorumPort=2888\npeerType=1\nmembership: \nserver.3=127.0.0.1:2888:0:participant\nversion=100000002"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := zk.Conf(&c.f); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// mntrLines splits mntr into its keys, in order, and their values.
func mntrLines(t *testing.T, out string) ([]string, map[string]string) {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("mntr does not end in a newline: %q", out[max(0, len(out)-40):])
	}
	var keys []string
	vals := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("mntr line %q has no tab", l)
		}
		if _, dup := vals[k]; dup {
			t.Fatalf("mntr key %s twice", k)
		}
		keys = append(keys, k)
		vals[k] = v
	}
	return keys, vals
}

func TestMntr(t *testing.T) {
	f := zk.MntrFigures{Figures: figures, Ephemerals: 2, Sessions: 3, Watches: 4, DataSize: 500, OpenFDs: 40, MaxFDs: 1024,
		UptimeMs: 9000, Proposals: 12, BytesReceived: 700, BytesOut: 800, Notifications: 5,
		ReadLatency:   zk.Summary{Cnt: 4, Sum: 10, SumExact: 9.5, Min: 1, Max: 5, Pct: [4]int64{2, 5, 5, 5}},
		UpdateLatency: zk.Summary{Cnt: 3, Sum: 3, SumExact: 3, Min: 0, Max: 2, Pct: [4]int64{1, 2, 2, 2}},
	}
	t.Run("standalone", func(t *testing.T) {
		keys, v := mntrLines(t, zk.Mntr(&f))
		for k, want := range map[string]string{
			"zk_version": figures.Version, "zk_server_state": "standalone", "zk_ephemerals_count": "2",
			"zk_num_alive_connections": "2", "zk_avg_latency": "1.2346", "zk_min_latency": "0", "zk_max_latency": "8",
			"zk_outstanding_requests": "1", "zk_znode_count": "8", "zk_global_sessions": "3", "zk_packets_sent": "26",
			"zk_packets_received": "25", "zk_watch_count": "4", "zk_approximate_data_size": "500",
			"zk_open_file_descriptor_count": "40", "zk_max_file_descriptor_count": "1024", "zk_uptime": "9000",
			"zk_proposal_count": "12", "zk_bytes_received_count": "700", "zk_response_bytes": "800",
			// not kept: an idle ZooKeeper's figures
			"zk_max_client_response_size": "-1", "zk_connection_drop_probability": "0.0", "zk_auth_failed_count": "0",
			"zk_avg_readlatency": "2.375", "zk_cnt_readlatency": "4", "zk_sum_readlatency": "10", "zk_p99_readlatency": "5",
			"zk_avg_updatelatency": "1.0", "zk_p50_updatelatency": "1", "zk_avg_fsynctime": "0.0",
			"zk_last_zxid": "31", "coordrun_watch_notifications": "5",
		} {
			if v[k] != want {
				t.Errorf("%s = %q, want %q", k, v[k], want)
			}
		}
		for _, k := range []string{"zk_peer_state", "zk_quorum_size", "zk_learners", "zk_followers", "zk_synced_followers", "zk_min_proposal_size"} {
			if _, ok := v[k]; ok {
				t.Errorf("a standalone server prints %s", k)
			}
		}
		// ZooKeeper's registry order: what simple checks reading the
		// first 2 KiB see.
		if keys[0] != "zk_version" || keys[1] != "zk_server_state" || keys[2] != "zk_ephemerals_count" {
			t.Errorf("mntr begins %v", keys[:3])
		}
		if n := len(keys); keys[n-2] != "zk_last_zxid" || keys[n-1] != "coordrun_watch_notifications" {
			t.Errorf("mntr ends %v", keys[n-2:])
		}
	})
	t.Run("follower", func(t *testing.T) {
		g := f
		g.Mode, g.QuorumSize = "follower", 3
		_, v := mntrLines(t, zk.Mntr(&g))
		if v["zk_peer_state"] != "following - broadcast" || v["zk_quorum_size"] != "3" {
			t.Errorf("peer_state %q, quorum_size %q", v["zk_peer_state"], v["zk_quorum_size"])
		}
		if _, ok := v["zk_learners"]; ok {
			t.Error("a follower prints zk_learners")
		}
	})
	t.Run("leader", func(t *testing.T) {
		g := f
		g.Mode, g.QuorumSize, g.Learners, g.SyncedFollowers, g.SyncedObservers = "leader", 3, 2, 1, 1
		g.Followers = []string{"2", "3"}
		keys, v := mntrLines(t, zk.Mntr(&g))
		for k, want := range map[string]string{
			"zk_peer_state": "leading - broadcast", "zk_quorum_size": "3", "zk_learners": "2", "zk_followers": "2",
			"zk_synced_followers": "1", "zk_synced_observers": "1", "zk_min_proposal_size": "-1", "zk_leader_uptime": "0",
			"zk_cnt_2_learner_handler_qp_size": "0", "zk_p999_3_learner_handler_qp_time_ms": "0",
		} {
			if v[k] != want {
				t.Errorf("%s = %q, want %q", k, v[k], want)
			}
		}
		// The queue sizes of every follower, then their times, as a
		// ZooKeeper leader prints them.
		at := func(k string) int {
			for i, x := range keys {
				if x == k {
					return i
				}
			}
			t.Fatalf("no %s", k)
			return 0
		}
		if !(at("zk_sum_3_learner_handler_qp_size") < at("zk_avg_2_learner_handler_qp_time_ms")) {
			t.Error("learner handler sets out of ZooKeeper's order")
		}
		if n := len(keys); keys[n-1] != "coordrun_watch_notifications" || keys[n-2] != "zk_followers" {
			t.Errorf("a leader's mntr ends %v", keys[n-3:])
		}
	})
}
