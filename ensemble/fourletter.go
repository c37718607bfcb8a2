package ensemble

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/coordrun/coordrun/ensemble/zk"
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
// own. ZooKeeper's answer in the layout of Apache ZooKeeper 3.8, which
// ensemble/zk renders; the member gathers the figures.

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
			out = zk.Srvr(m.figures(), nil)
		case "stat":
			out = zk.Srvr(m.figures(), m.clientList(nc))
		case "mntr":
			out = zk.Mntr(m.mntrFigures())
		case "conf":
			out = zk.Conf(m.confFigures())
		case "srst":
			m.stats.reset()
			out = "Server stats reset.\n"
		}
	case "envi":
		out = zk.Envi(enviEntries())
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

// figures are srvr's, read from the member's state.
func (m *Member) figures() *zk.Figures {
	lmin, lavg, lmax := m.stats.latencyMs()
	nodes, _, _ := m.counts()
	return &zk.Figures{
		Version:    fullVersion(),
		LatencyMin: lmin, LatencyAvg: lavg, LatencyMax: lmax,
		Received: m.stats.received.Load(), Sent: m.stats.sent.Load(),
		Connections: m.stats.connections.Load(), Outstanding: m.stats.outstanding.Load(),
		Zxid:  m.fsm.lastZxid(),
		Mode:  m.mode(),
		Nodes: nodes,
	}
}

// clientList is every connection open on the client port, for stat.
// queued is what a session has read and not yet answered. Connections do
// not count their own requests (the member counts them in total, for
// srvr), so recved is 0, except the asker's: its word.
func (m *Member) clientList(self net.Conn) []zk.Client {
	s := m.clients
	s.mu.Lock()
	defer s.mu.Unlock()
	established := make(map[net.Conn]*conn, len(s.conns))
	for c := range s.conns {
		established[c.nc] = c
	}
	out := make([]zk.Client, 0, len(s.accepted))
	for nc := range s.accepted {
		if c, ok := established[nc]; ok {
			out = append(out, zk.Client{Remote: c.remote, Established: true, Queued: len(c.slots)})
			continue
		}
		cl := zk.Client{Remote: nc.RemoteAddr().String()}
		if nc == self {
			cl.Recved = 1
		}
		out = append(out, cl)
	}
	return out
}

// enviEntries are ZooKeeper's environment keys that apply to a Go
// process. The JVM's java.* properties have no counterpart; go.version
// takes java.version's place.
func enviEntries() [][2]string {
	host, _ := os.Hostname()
	userName, home := os.Getenv("USER"), os.Getenv("HOME")
	if u, err := user.Current(); err == nil {
		userName, home = u.Username, u.HomeDir
	}
	cwd, _ := os.Getwd()
	free, limit, total := memoryFigures()
	mb := func(n uint64) string { return strconv.FormatUint(n>>20, 10) + "MB" }
	return [][2]string{
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
	}
}

// confFigures are conf's, read from the configuration and raft.
func (m *Member) confFigures() *zk.ConfFigures {
	dir, err := filepath.Abs(m.cfg.DataDir)
	if err != nil {
		dir = m.cfg.DataDir
	}
	f := &zk.ConfFigures{
		ClientPort: portOf(m.ClientAddr()), SecurePort: -1,
		DataDir: dir, DataDirSize: dirSize(dir),
		// A negative cap is none: ZooKeeper's 0.
		MaxClientConns:      max(m.cfg.MaxClientConns, 0),
		MinSessionTimeoutMs: m.cfg.MinSessionTimeout.Milliseconds(),
		MaxSessionTimeoutMs: m.cfg.MaxSessionTimeout.Milliseconds(),
		ServerID:            m.cfg.ID,
	}
	// coordrun serves a plain or a TLS client port, never both.
	if m.cfg.ClientTLS != nil {
		f.ClientPort, f.SecurePort = -1, f.ClientPort
	}
	if m.mode() == "standalone" {
		return f
	}
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		return f
	}
	f.Quorum, f.QuorumPort = true, portOf(m.PeerAddr())
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == m.cfg.ID && s.Suffrage != raft.Voter {
			f.Observer = true
		}
	}
	f.Membership, _ = m.configData()
	return f
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
