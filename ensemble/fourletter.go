package ensemble

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// notServing is ZooKeeper's answer to srvr, stat, mntr, conf and srst
// from a server outside a working quorum; monitoring (Datadog's check
// among others) takes it for an inactive server rather than a broken one.
const notServing = "This ZooKeeper instance is not currently serving requests\n"

// The four-letter words on the client port, ZooKeeper's and coordrun's
// own. ZooKeeper's answer in the layout of Apache ZooKeeper 3.8 (line
// order, key names, number formats), since exporters and checks parse
// them by position or by key; internal/difftest compares them with the
// real server's.

// fourLetter answers a four-letter word and closes, as ZooKeeper does.
func (m *Member) fourLetter(word string, nc net.Conn) {
	_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if !m.fourLetterAllowed(word, nc) {
		m.stats.refused.WithLabelValues(refusedWord).Inc()
		_, _ = nc.Write([]byte(notWhitelisted(word)))
		return
	}
	var out string
	serving := m.serving()
	switch word {
	case "ruok":
		out = "imok"
	case "isro":
		// coordrun has no read-only mode: a member either serves with
		// the quorum or not at all, which ZooKeeper reports as "null".
		out = "rw"
		if !serving {
			out = "null"
		}
	case "srvr", "stat", "mntr", "conf", "srst":
		if !serving {
			out = notServing
			break
		}
		switch word {
		case "srvr":
			out = m.srvr(nc, false)
		case "stat":
			out = m.srvr(nc, true)
		case "mntr":
			out = m.mntr()
		case "conf":
			out = m.conf()
		case "srst":
			m.stats.reset()
			out = "Server stats reset.\n"
		}
	case "envi":
		out = m.envi()
	case "wchp", "wchc", "wchs":
		switch {
		case !serving:
			out = notServing
		case word == "wchs":
			out = m.watch.summary()
		default:
			out = m.watch.dump(word == "wchp")
		}
	case statusWord:
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		b, _ := json.Marshal(m.ensembleStatus(ctx))
		out = string(b) + "\n"
	default:
		out = notWhitelisted(word)
	}
	_, _ = nc.Write([]byte(out))
}

// serving: the member knows a leader, so it can answer clients. A
// ZooKeeper server without one is looking for it and serves nobody.
func (m *Member) serving() bool {
	_, id := m.raft.LeaderWithID()
	return id != ""
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

// fullVersion is ZooKeeper's Version.getFullVersion for coordrun:
// "3.8.4-coordrun[-<commit>], built on 2006-01-02 15:04 UTC".
var fullVersion = sync.OnceValue(func() string {
	v, built := Version, time.Time{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v += "-" + s.Value[:min(len(s.Value), 12)]
			case "vcs.time":
				built, _ = time.Parse(time.RFC3339, s.Value)
			}
		}
	}
	// Without VCS stamps (a build outside a checkout) the binary's own
	// time is the nearest thing to a build date.
	if built.IsZero() {
		if exe, err := os.Executable(); err == nil {
			if info, err := os.Stat(exe); err == nil {
				built = info.ModTime()
			}
		}
	}
	if built.IsZero() {
		built = processStart
	}
	return v + ", built on " + built.UTC().Format("2006-01-02 15:04") + " UTC"
})

// latencyFigures are the min, avg and max of srvr and mntr in ZooKeeper's
// formats: whole milliseconds for the bounds and a Java double rounded to
// four places for the average. ZooKeeper times requests in whole
// milliseconds; coordrun's finer times are rounded outwards (min down,
// max up) so that the average always lies between them.
func (m *Member) latencyFigures() (lmin int64, lavg string, lmax int64) {
	fmin, favg, fmax := m.stats.latencyMs()
	return int64(math.Floor(fmin)), javaDouble(favg), int64(math.Ceil(fmax))
}

// javaDouble formats v, rounded to four decimal places, as Java's
// Double.toString prints it: "0.0", "2.25", "1.0E-4", "1.2345E7".
func javaDouble(v float64) string {
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

// srvr is srvr, and with the client list stat, in ZooKeeper 3.8's layout.
// A leader adds ZooKeeper's proposal sizes line; coordrun does not measure
// proposal sizes, so it carries ZooKeeper's figures for none (-1).
func (m *Member) srvr(self net.Conn, withClients bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s\n", fullVersion())
	if withClients {
		b.WriteString("Clients:\n")
		for _, l := range m.clientLines(self) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		b.WriteString("\n")
	}
	lmin, lavg, lmax := m.latencyFigures()
	nodes, _, _ := m.counts()
	mode := m.mode()
	fmt.Fprintf(&b, "Latency min/avg/max: %d/%s/%d\n", lmin, lavg, lmax)
	fmt.Fprintf(&b, "Received: %d\n", m.stats.received.Load())
	fmt.Fprintf(&b, "Sent: %d\n", m.stats.sent.Load())
	fmt.Fprintf(&b, "Connections: %d\n", m.stats.connections.Load())
	fmt.Fprintf(&b, "Outstanding: %d\n", m.stats.outstanding.Load())
	fmt.Fprintf(&b, "Zxid: 0x%x\n", m.fsm.lastZxid())
	fmt.Fprintf(&b, "Mode: %s\n", mode)
	fmt.Fprintf(&b, "Node count: %d\n", nodes)
	if mode == "leader" {
		b.WriteString("Proposal sizes last/min/max: -1/-1/-1\n")
	}
	return b.String()
}

// clientLines are stat's client list in ZooKeeper's brief form, one line
// per connection open on the client port, sorted:
//
//	/127.0.0.1:50452[1](queued=0,recved=0,sent=0)
//
// [1] marks an established session (ZooKeeper's interest in reading), [0]
// a connection not yet established or, like the asker's, serving a
// four-letter word. queued is what the session has read and not yet
// answered. Connections do not count their own requests and replies
// (the member counts them in total, for srvr), so recved and sent are 0,
// except the asker's recved: its word.
func (m *Member) clientLines(self net.Conn) []string {
	s := m.clients
	s.mu.Lock()
	established := make(map[net.Conn]*conn, len(s.conns))
	for c := range s.conns {
		established[c.nc] = c
	}
	lines := make([]string, 0, len(s.accepted))
	for nc := range s.accepted {
		if c, ok := established[nc]; ok {
			lines = append(lines, fmt.Sprintf(" /%s[1](queued=%d,recved=0,sent=0)", c.remote, len(c.slots)))
			continue
		}
		recved := 0
		if nc == self {
			recved = 1
		}
		lines = append(lines, fmt.Sprintf(" /%s[0](queued=0,recved=%d,sent=0)", nc.RemoteAddr(), recved))
	}
	s.mu.Unlock()
	sort.Strings(lines)
	return lines
}

// envi is ZooKeeper's environment listing with the keys that apply to a
// Go process. The JVM's java.* properties have no counterpart; go.version
// takes java.version's place.
func (m *Member) envi() string {
	host, _ := os.Hostname()
	userName, home := os.Getenv("USER"), os.Getenv("HOME")
	if u, err := user.Current(); err == nil {
		userName, home = u.Username, u.HomeDir
	}
	cwd, _ := os.Getwd()
	free, limit, total := memoryFigures()
	mb := func(n uint64) string { return strconv.FormatUint(n>>20, 10) + "MB" }
	var b strings.Builder
	b.WriteString("Environment:\n")
	for _, kv := range [][2]string{
		{"zookeeper.version", fullVersion()},
		{"host.name", host},
		{"go.version", runtime.Version()},
		{"os.name", kernelName()},
		{"os.arch", runtime.GOARCH},
		{"os.version", kernelRelease()},
		{"user.name", userName},
		{"user.home", home},
		{"user.dir", cwd},
		{"os.memory.free", mb(free)},
		{"os.memory.max", mb(limit)},
		{"os.memory.total", mb(total)},
	} {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
		b.WriteByte('\n')
	}
	return b.String()
}

// conf is ZooKeeper 3.8's conf: the server's settings, and for a member of
// a quorum its peer settings and the membership in ZooKeeper's config
// syntax (server.<id>=host:quorumPort:electionPort:role, then the
// configuration's version in hex, without a final newline, as ZooKeeper
// prints it). Left out are ZooKeeper's tick-based settings (tickTime,
// initLimit, syncLimit) and electionAlg: raft's heartbeat and election
// timeouts govern coordrun instead. The data and log dirs are both the
// member's data dir, which holds raft's log and snapshots.
func (m *Member) conf() string {
	dir, err := filepath.Abs(m.cfg.DataDir)
	if err != nil {
		dir = m.cfg.DataDir
	}
	size := dirSize(dir)
	// A TLS client port is what ZooKeeper calls its secure client port;
	// coordrun serves one or the other, never both.
	port, secure := portOf(m.ClientAddr()), -1
	if m.cfg.ClientTLS != nil {
		port, secure = -1, port
	}
	var b strings.Builder
	fmt.Fprintf(&b, "clientPort=%d\n", port)
	fmt.Fprintf(&b, "secureClientPort=%d\n", secure)
	fmt.Fprintf(&b, "dataDir=%s\n", dir)
	fmt.Fprintf(&b, "dataDirSize=%d\n", size)
	fmt.Fprintf(&b, "dataLogDir=%s\n", dir)
	fmt.Fprintf(&b, "dataLogSize=%d\n", size)
	// A negative cap is none: ZooKeeper's 0.
	fmt.Fprintf(&b, "maxClientCnxns=%d\n", max(m.cfg.MaxClientConns, 0))
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", m.cfg.MinSessionTimeout.Milliseconds())
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", m.cfg.MaxSessionTimeout.Milliseconds())
	// The listener's backlog is the system's: ZooKeeper's -1, unset.
	b.WriteString("clientPortListenBacklog=-1\n")
	fmt.Fprintf(&b, "serverId=%s\n", m.cfg.ID)
	if m.mode() == "standalone" {
		return b.String()
	}
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		return b.String()
	}
	// One peer port carries raft's replication and its elections: it is
	// the quorum port, and there is no election port of ZooKeeper's kind
	// (0, as in the membership lines).
	peerType := 0 // participant
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == m.cfg.ID && s.Suffrage != raft.Voter {
			peerType = 1 // observer
		}
	}
	b.WriteString("electionPort=0\n")
	fmt.Fprintf(&b, "quorumPort=%d\n", portOf(m.PeerAddr()))
	fmt.Fprintf(&b, "peerType=%d\n", peerType)
	b.WriteString("membership: \n")
	data, _ := m.configData()
	b.Write(data)
	return b.String()
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
