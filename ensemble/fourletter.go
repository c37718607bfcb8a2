package ensemble

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Version is what the four-letter words report. ZooKeeper clients parse
// the leading "major.minor.patch", so it names the ZooKeeper protocol
// level served, followed by coordrun's own.
const Version = "3.8.4-coordrun"

// statusWord is coordrun's own word on the client port: the ensemble's
// members and their raft state as JSON (used by `coordrun ensemble status`).
const statusWord = "mbrs"

// The four-letter words on the client port, ZooKeeper's and coordrun's
// own: the answers are text built from the member's state and its request
// stats.

// fourLetter answers a four-letter word and closes, as ZooKeeper does.
func (m *Member) fourLetter(word string, nc net.Conn) {
	_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var out string
	switch word {
	case "ruok":
		out = "imok"
	case "isro":
		out = "rw"
	case "srvr":
		out = m.srvr(false)
	case "stat":
		out = m.srvr(true)
	case "mntr":
		out = m.mntr()
	case "envi":
		out = m.envi()
	case "conf":
		out = m.conf()
	case "srst":
		m.stats.reset()
		out = "Server stats reset.\n"
	case statusWord:
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		b, _ := json.Marshal(m.ensembleStatus(ctx))
		out = string(b) + "\n"
	default:
		out = word + " is not executed because it is not in the whitelist.\n"
	}
	_, _ = nc.Write([]byte(out))
}

func (m *Member) mode() string {
	if len(m.cfg.Peers) == 1 && m.IsLeader() {
		return "standalone"
	}
	switch m.raft.State() {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	}
	return "looking"
}

func (m *Member) srvr(withClients bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s, built on %s\n", Version, "unknown")
	if withClients {
		b.WriteString("Clients:\n")
		var lines []string
		m.clients.each(func(c *conn) {
			lines = append(lines, fmt.Sprintf(" /%s[1](queued=0,recved=0,sent=0,sid=0x%x)\n", c.remote, c.session))
		})
		sort.Strings(lines)
		for _, l := range lines {
			b.WriteString(l)
		}
		b.WriteString("\n")
	}
	lmin, lavg, lmax := m.stats.latencyMs()
	nodes, _, _ := m.counts()
	fmt.Fprintf(&b, "Latency min/avg/max: %s/%s/%s\n", fmtMs(lmin), fmtMs(lavg), fmtMs(lmax))
	fmt.Fprintf(&b, "Received: %d\n", m.stats.received.Load())
	fmt.Fprintf(&b, "Sent: %d\n", m.stats.sent.Load())
	fmt.Fprintf(&b, "Connections: %d\n", m.stats.connections.Load())
	fmt.Fprintf(&b, "Outstanding: %d\n", m.stats.outstanding.Load())
	fmt.Fprintf(&b, "Zxid: 0x%x\n", m.fsm.lastZxid())
	fmt.Fprintf(&b, "Mode: %s\n", m.mode())
	fmt.Fprintf(&b, "Node count: %d\n", nodes)
	return b.String()
}

func fmtMs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (m *Member) mntr() string {
	lmin, lavg, lmax := m.stats.latencyMs()
	nodes, eph, size := m.counts()
	kv := [][2]string{
		{"zk_version", Version},
		{"zk_server_state", m.mode()},
		{"zk_avg_latency", fmtMs(lavg)},
		{"zk_max_latency", fmtMs(lmax)},
		{"zk_min_latency", fmtMs(lmin)},
		{"zk_packets_received", strconv.FormatInt(m.stats.received.Load(), 10)},
		{"zk_packets_sent", strconv.FormatInt(m.stats.sent.Load(), 10)},
		{"zk_num_alive_connections", strconv.FormatInt(m.stats.connections.Load(), 10)},
		{"zk_outstanding_requests", strconv.FormatInt(m.stats.outstanding.Load(), 10)},
		{"zk_znode_count", strconv.Itoa(nodes)},
		{"zk_watch_count", strconv.Itoa(m.watch.count())},
		{"zk_ephemerals_count", strconv.Itoa(eph)},
		{"zk_approximate_data_size", strconv.FormatInt(size, 10)},
		{"zk_global_sessions", strconv.Itoa(m.track.count())},
		{"zk_last_zxid", strconv.FormatInt(m.fsm.lastZxid(), 10)},
		{"coordrun_watch_notifications", strconv.FormatInt(m.stats.notifications.Load(), 10)},
	}
	if m.IsLeader() {
		peers := len(m.cfg.Peers)
		if cf := m.raft.GetConfiguration(); cf.Error() == nil {
			peers = len(cf.Configuration().Servers)
		}
		kv = append(kv,
			[2]string{"zk_followers", strconv.Itoa(peers - 1)},
			[2]string{"zk_synced_followers", strconv.Itoa(peers - 1)})
	}
	var b strings.Builder
	for _, p := range kv {
		b.WriteString(p[0])
		b.WriteByte('\t')
		b.WriteString(p[1])
		b.WriteByte('\n')
	}
	return b.String()
}

func (m *Member) envi() string {
	host, _ := os.Hostname()
	var b strings.Builder
	b.WriteString("Environment:\n")
	fmt.Fprintf(&b, "zookeeper.version=%s, built on unknown\n", Version)
	fmt.Fprintf(&b, "host.name=%s\n", host)
	fmt.Fprintf(&b, "go.version=%s\n", runtime.Version())
	fmt.Fprintf(&b, "os.name=%s\n", runtime.GOOS)
	fmt.Fprintf(&b, "os.arch=%s\n", runtime.GOARCH)
	fmt.Fprintf(&b, "user.dir=%s\n", m.cfg.DataDir)
	return b.String()
}

// conf lists the ensemble in ZooKeeper's dynamic-config style, which is
// also what /zookeeper/config holds.
func (m *Member) conf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clientPort=%d\n", portOf(m.ClientAddr()))
	fmt.Fprintf(&b, "dataDir=%s\n", m.cfg.DataDir)
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", m.cfg.MaxSessionTimeout.Milliseconds())
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", m.cfg.MinSessionTimeout.Milliseconds())
	fmt.Fprintf(&b, "serverId=%s\n", m.cfg.ID)
	if cf := m.raft.GetConfiguration(); cf.Error() == nil {
		for _, s := range cf.Configuration().Servers {
			fmt.Fprintf(&b, "server.%s=%s:participant\n", s.ID, s.Address)
		}
	}
	return b.String()
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
