package zk

// ZooKeeper 3.8's four-letter answers, rendered from plain figures: the
// layouts (line order, key names, number formats) live here, since
// exporters and checks parse them by position or by key; the member only
// gathers the figures. internal/difftest compares the member's answers with
// the real server's.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Figures are what srvr and stat report, and mntr begins with.
type Figures struct {
	Version string // ZooKeeper's Version.getFullVersion: "3.8.4-coordrun, built on ..."
	// Latencies in milliseconds, as the member measures them (finer
	// than ZooKeeper's whole milliseconds).
	LatencyMin, LatencyAvg, LatencyMax float64
	Received, Sent                     int64 // packets
	Connections, Outstanding           int64
	Zxid                               int64
	Mode                               string // standalone, leader, follower or looking
	Nodes                              int
}

// Client is one connection on the client port, as stat lists it.
type Client struct {
	Remote      string // host:port
	Established bool   // a session; false: connecting, or asking a four-letter word
	Queued      int    // requests read and not yet answered
	Recved      int
}

// Srvr is srvr's answer, and with clients (not nil) stat's, in ZooKeeper
// 3.8's layout. A leader adds ZooKeeper's proposal sizes line; coordrun
// does not measure proposal sizes, so it carries ZooKeeper's figures for
// none (-1).
func Srvr(f *Figures, clients []Client) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s\n", f.Version)
	if clients != nil {
		b.WriteString("Clients:\n")
		for _, l := range clientLines(clients) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		b.WriteString("\n")
	}
	lmin, lavg, lmax := latencies(f)
	fmt.Fprintf(&b, "Latency min/avg/max: %d/%s/%d\n", lmin, lavg, lmax)
	fmt.Fprintf(&b, "Received: %d\n", f.Received)
	fmt.Fprintf(&b, "Sent: %d\n", f.Sent)
	fmt.Fprintf(&b, "Connections: %d\n", f.Connections)
	fmt.Fprintf(&b, "Outstanding: %d\n", f.Outstanding)
	fmt.Fprintf(&b, "Zxid: 0x%x\n", f.Zxid)
	fmt.Fprintf(&b, "Mode: %s\n", f.Mode)
	fmt.Fprintf(&b, "Node count: %d\n", f.Nodes)
	if f.Mode == "leader" {
		b.WriteString("Proposal sizes last/min/max: -1/-1/-1\n")
	}
	return b.String()
}

// clientLines are stat's client list in ZooKeeper's brief form, sorted:
//
//	/127.0.0.1:50452[1](queued=0,recved=0,sent=0)
//
// [1] marks an established session (ZooKeeper's interest in reading), [0]
// a connection not yet established or serving a four-letter word.
// Connections do not count their replies, so sent is 0.
func clientLines(clients []Client) []string {
	lines := make([]string, 0, len(clients))
	for _, c := range clients {
		interest := 0
		if c.Established {
			interest = 1
		}
		lines = append(lines, fmt.Sprintf(" /%s[%d](queued=%d,recved=%d,sent=0)", c.Remote, interest, c.Queued, c.Recved))
	}
	slices.Sort(lines)
	return lines
}

// latencies are the min, avg and max of srvr and mntr in ZooKeeper's
// formats: whole milliseconds for the bounds and a Java double rounded to
// four places for the average. ZooKeeper times requests in whole
// milliseconds; finer times are rounded outwards (min down, max up) so
// that the average always lies between them.
func latencies(f *Figures) (lmin int64, lavg string, lmax int64) {
	return int64(math.Floor(f.LatencyMin)), JavaDouble(f.LatencyAvg), int64(math.Ceil(f.LatencyMax))
}

// JavaDouble formats v, rounded to four decimal places, as Java's
// Double.toString prints it: "0.0", "2.25", "1.0E-4", "1.2345E7".
func JavaDouble(v float64) string {
	v = math.Round(v*1e4) / 1e4
	if a := math.Abs(v); a == 0 || (a >= 1e-3 && a < 1e7) {
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	mant, exp, _ := strings.Cut(strconv.FormatFloat(v, 'e', -1, 64), "e")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	e, _ := strconv.Atoi(exp)
	return mant + "E" + strconv.Itoa(e)
}

// Envi is envi's answer: "Environment:" and one key=value line per entry,
// in the order given.
func Envi(entries [][2]string) string {
	var b strings.Builder
	b.WriteString("Environment:\n")
	for _, kv := range entries {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
		b.WriteByte('\n')
	}
	return b.String()
}

// ConfFigures are what conf reports.
type ConfFigures struct {
	// ClientPort and SecurePort: a TLS client port is what ZooKeeper
	// calls its secure client port; -1 for the one not served.
	ClientPort, SecurePort int
	DataDir                string // absolute; both ZooKeeper's data and log dirs
	DataDirSize            int64
	MaxClientConns         int // 0: no cap
	MinSessionTimeoutMs    int64
	MaxSessionTimeoutMs    int64
	ServerID               string
	// Quorum: a member of an ensemble, not standalone; the rest is
	// printed only then.
	Quorum     bool
	QuorumPort int
	Observer   bool
	// Membership is the configuration in ZooKeeper's syntax
	// (server.<id>=host:quorumPort:electionPort:role lines, then
	// version=<hex>), without a final newline, as ZooKeeper prints it.
	Membership []byte
}

// Conf is ZooKeeper 3.8's conf: the server's settings, and for a member of
// a quorum its peer settings and the membership. Left out are ZooKeeper's
// tick-based settings (tickTime, initLimit, syncLimit) and electionAlg:
// raft's heartbeat and election timeouts govern coordrun instead. One peer
// port carries raft's replication and its elections: it is the quorum
// port, and there is no election port of ZooKeeper's kind (0, as in the
// membership lines).
func Conf(f *ConfFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "clientPort=%d\n", f.ClientPort)
	fmt.Fprintf(&b, "secureClientPort=%d\n", f.SecurePort)
	fmt.Fprintf(&b, "dataDir=%s\n", f.DataDir)
	fmt.Fprintf(&b, "dataDirSize=%d\n", f.DataDirSize)
	fmt.Fprintf(&b, "dataLogDir=%s\n", f.DataDir)
	fmt.Fprintf(&b, "dataLogSize=%d\n", f.DataDirSize)
	fmt.Fprintf(&b, "maxClientCnxns=%d\n", f.MaxClientConns)
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", f.MinSessionTimeoutMs)
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", f.MaxSessionTimeoutMs)
	// The listener's backlog is the system's: ZooKeeper's -1, unset.
	b.WriteString("clientPortListenBacklog=-1\n")
	fmt.Fprintf(&b, "serverId=%s\n", f.ServerID)
	if !f.Quorum {
		return b.String()
	}
	peerType := 0 // participant
	if f.Observer {
		peerType = 1
	}
	b.WriteString("electionPort=0\n")
	fmt.Fprintf(&b, "quorumPort=%d\n", f.QuorumPort)
	fmt.Fprintf(&b, "peerType=%d\n", peerType)
	b.WriteString("membership: \n")
	b.Write(f.Membership)
	return b.String()
}
