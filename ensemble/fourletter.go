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
		b, _ := json.Marshal(m.EnsembleStatus(ctx))
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

func (m *Member) counts() (nodes, ephemerals int, dataSize int64) {
	m.fsm.mu.RLock()
	defer m.fsm.mu.RUnlock()
	return m.fsm.tree.NodeCount(), m.fsm.tree.EphemeralCount(), m.fsm.tree.ApproximateDataSize()
}

func (m *Member) srvr(withClients bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s, built on %s\n", Version, "unknown")
	if withClients {
		b.WriteString("Clients:\n")
		m.connMu.Lock()
		var lines []string
		for c := range m.conns {
			lines = append(lines, fmt.Sprintf(" /%s[1](queued=0,recved=0,sent=0,sid=0x%x)\n", c.remote, c.session))
		}
		m.connMu.Unlock()
		sort.Strings(lines)
		for _, l := range lines {
			b.WriteString(l)
		}
		b.WriteString("\n")
	}
	lmin, lavg, lmax := m.stats.latency()
	nodes, _, _ := m.counts()
	fmt.Fprintf(&b, "Latency min/avg/max: %s/%s/%s\n", fmtMs(lmin), fmtMs(lavg), fmtMs(lmax))
	fmt.Fprintf(&b, "Received: %d\n", m.stats.received.Load())
	fmt.Fprintf(&b, "Sent: %d\n", m.stats.sent.Load())
	fmt.Fprintf(&b, "Connections: %d\n", m.stats.connections.Load())
	fmt.Fprintf(&b, "Outstanding: %d\n", m.metrics.outstanding.Load())
	fmt.Fprintf(&b, "Zxid: 0x%x\n", m.fsm.applied.Load())
	fmt.Fprintf(&b, "Mode: %s\n", m.mode())
	fmt.Fprintf(&b, "Node count: %d\n", nodes)
	return b.String()
}

func fmtMs(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (m *Member) mntr() string {
	lmin, lavg, lmax := m.stats.latency()
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
		{"zk_outstanding_requests", strconv.FormatInt(m.metrics.outstanding.Load(), 10)},
		{"zk_znode_count", strconv.Itoa(nodes)},
		{"zk_watch_count", strconv.Itoa(m.watch.count())},
		{"zk_ephemerals_count", strconv.Itoa(eph)},
		{"zk_approximate_data_size", strconv.FormatInt(size, 10)},
		{"zk_global_sessions", strconv.Itoa(m.track.count())},
		{"zk_last_zxid", strconv.FormatInt(m.fsm.applied.Load(), 10)},
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

// MemberStatus is one member's view of itself.
type MemberStatus struct {
	ID           string `json:"id"`
	PeerAddr     string `json:"peer_addr"`
	ClientAddr   string `json:"client_addr,omitempty"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastZxid     int64  `json:"last_zxid"`
	Leader       string `json:"leader"`
	Sessions     int    `json:"sessions"`
	Znodes       int    `json:"znodes"`
	Error        string `json:"error,omitempty"`
}

// Status is the ensemble as one member sees it, with each member's own
// report fetched over the peer port.
type Status struct {
	Leader  string         `json:"leader"`
	Members []MemberStatus `json:"members"`
}

func (m *Member) localStatus() MemberStatus {
	_, leaderID := m.raft.LeaderWithID()
	nodes, _, _ := m.counts()
	stats := m.raft.Stats()
	term, _ := strconv.ParseUint(stats["term"], 10, 64)
	return MemberStatus{
		ID:           m.cfg.ID,
		PeerAddr:     m.PeerAddr(),
		ClientAddr:   m.ClientAddr(),
		State:        strings.ToLower(m.raft.State().String()),
		Term:         term,
		CommitIndex:  m.raft.CommitIndex(),
		AppliedIndex: m.raft.AppliedIndex(),
		LastZxid:     m.fsm.applied.Load(),
		Leader:       string(leaderID),
		Sessions:     m.track.count(),
		Znodes:       nodes,
	}
}

func (m *Member) localStatusJSON() []byte {
	b, _ := json.Marshal(m.localStatus())
	return b
}

// EnsembleStatus asks every member in the raft configuration for its
// status; unreachable members are reported with an error.
func (m *Member) EnsembleStatus(ctx context.Context) Status {
	_, leaderID := m.raft.LeaderWithID()
	st := Status{Leader: string(leaderID)}
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		st.Members = []MemberStatus{m.localStatus()}
		return st
	}
	servers := cf.Configuration().Servers
	st.Members = make([]MemberStatus, len(servers))
	done := make(chan struct{}, len(servers))
	for i, s := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			if string(s.ID) == m.cfg.ID {
				st.Members[i] = m.localStatus()
				return
			}
			ms := MemberStatus{ID: string(s.ID), PeerAddr: string(s.Address)}
			rc, err := m.pool.get(string(s.Address))
			if err == nil {
				var kind byte
				var payload []byte
				kind, payload, err = rc.call(ctx, rpcStatus, nil)
				if err == nil && kind == rpcStatus {
					err = json.Unmarshal(payload, &ms)
				} else if err == nil {
					err = fmt.Errorf("%s", rpcErrorText(kind, payload))
				}
			}
			if err != nil {
				ms.State = "unreachable"
				ms.Error = err.Error()
			}
			st.Members[i] = ms
		}()
	}
	for range servers {
		<-done
	}
	return st
}
