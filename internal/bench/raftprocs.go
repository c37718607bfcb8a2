package main

// Bare raft in three processes (-systems raft-procs): the nodes of
// raftceiling.go, each a child process (a copy of this binary), so that
// every message between them crosses processes as it does between
// coordrun's members, and a process that waits sleeps as theirs do. A
// client reaches the leader over a loopback TCP connection: one byte asks
// it to Apply client i's setData entry and answers once the entry is
// applied on the leader. Against the in-process row this shows what
// separate processes cost raft itself; against coordrun's write row, what
// coordrun adds.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// raftNodeEnv carries a child node's raftNodeSpec as JSON.
const raftNodeEnv = "COORDRUN_BENCH_RAFT_NODE"

type raftNodeSpec struct {
	ID        int      `json:"id"`
	Dir       string   `json:"dir"`
	Peers     []string `json:"peers"` // raft addresses, node i+1 at i
	Serve     string   `json:"serve"` // where clients ask for Applies
	ValueSize int      `json:"value_size"`
}

// Client requests and answers, one byte each.
const (
	raftAsk       = 'a'
	raftOK        = 'k'
	raftNotLeader = 'n'
	raftFailed    = 'e'
)

// runRaftNodeIfChild runs this process as a bare raft node, for ever, if
// it was started as one; it returns at once otherwise.
func runRaftNodeIfChild() {
	v := os.Getenv(raftNodeEnv)
	if v == "" {
		return
	}
	var spec raftNodeSpec
	err := json.Unmarshal([]byte(v), &spec)
	if err == nil {
		err = serveRaftNode(spec)
	}
	fmt.Fprintln(os.Stderr, "raft node:", err)
	os.Exit(1)
}

func serveRaftNode(spec raftNodeSpec) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Error, Output: os.Stderr})
	var servers []raft.Server
	for i, a := range spec.Peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprint(i + 1)), Address: raft.ServerAddress(a)})
	}
	trans, err := raft.NewTCPTransportWithLogger(spec.Peers[spec.ID-1], nil, 4, 5*time.Second, log)
	if err != nil {
		return err
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(spec.Dir, "raft.db"))
	if err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(spec.Dir, 2, log)
	if err != nil {
		return err
	}
	cfg := raftConfig(fmt.Sprint(spec.ID), log)
	if err := raft.BootstrapCluster(cfg, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return err
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return err
	}
	r, err := raft.NewRaft(cfg, nopFSM{}, logs, store, snaps, trans)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", spec.Serve)
	if err != nil {
		return err
	}
	value := make([]byte, spec.ValueSize)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		// One goroutine per client connection, for the process's life:
		// the process ends with the bench, not before.
		go serveRaftClient(c, r, value)
	}
}

// serveRaftClient answers one client's requests; the first byte after
// the ask is the client's number, which picks its entry.
func serveRaftClient(c net.Conn, r *raft.Raft, value []byte) {
	defer c.Close()
	rd := bufio.NewReader(c)
	var entry []byte
	for {
		ask, err := rd.ReadByte()
		if err != nil || ask != raftAsk {
			return
		}
		if entry == nil {
			var i [4]byte
			if _, err := io.ReadFull(rd, i[:]); err != nil {
				return
			}
			n := int(i[0])<<24 | int(i[1])<<16 | int(i[2])<<8 | int(i[3])
			if entry, err = setDataEntry(n, value); err != nil {
				return
			}
		}
		answer := byte(raftOK)
		if r.State() != raft.Leader {
			answer = raftNotLeader
		} else if r.Apply(entry, 5*time.Second).Error() != nil {
			answer = raftFailed
		}
		if _, err := c.Write([]byte{answer}); err != nil {
			return
		}
	}
}

// raftProcs is the three node processes and where they serve clients.
type raftProcs struct {
	serve []string
}

func startRaftProcs(ctx context.Context, dir string, valueSize int) (*raftProcs, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	rp := &raftProcs{}
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		rp.serve = append(rp.serve, fmt.Sprintf("127.0.0.1:%d", ports[3+i]))
	}
	for i := range 3 {
		d := filepath.Join(dir, fmt.Sprintf("r%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		spec, _ := json.Marshal(raftNodeSpec{ID: i + 1, Dir: d, Peers: peers, Serve: rp.serve[i], ValueSize: valueSize})
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), raftNodeEnv+"="+string(spec))
		logPath := filepath.Join(dir, fmt.Sprintf("r%d.log", i+1))
		logf, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		_, err = startChild(fmt.Sprintf("raft-procs-%d", i+1), logPath, cmd)
		logf.Close()
		if err != nil {
			return nil, err
		}
	}
	err = poll(ctx, 20*time.Second, 20*time.Millisecond, "bare raft (processes) leader", func() (bool, error) {
		c, err := rp.dialLeader(ctx, 0)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
	return rp, err
}

// dialLeader connects client i to the node that leads, having had it
// apply the client's entry once.
func (rp *raftProcs) dialLeader(ctx context.Context, i int) (net.Conn, error) {
	var d net.Dialer
	for _, a := range rp.serve {
		c, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			continue
		}
		if ans, err := raftRoundTrip(c, []byte{raftAsk, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}); err == nil && ans == raftOK {
			return c, nil
		}
		c.Close()
	}
	return nil, errors.New("no bare raft node leads")
}

func raftRoundTrip(c net.Conn, req []byte) (byte, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// target drives the leader: every op is a write.
func (rp *raftProcs) target() target {
	return target{name: "raft-procs", open: func(ctx context.Context, i int) (worker, error) {
		c, err := rp.dialLeader(ctx, i)
		if err != nil {
			return worker{}, err
		}
		return worker{close: func() { c.Close() }, op: func(_ context.Context, write bool) error {
			if !write {
				return fmt.Errorf("bare raft serves writes only")
			}
			ans, err := raftRoundTrip(c, []byte{raftAsk})
			switch {
			case err != nil:
				return err
			case ans == raftNotLeader:
				return raft.ErrNotLeader
			case ans != raftOK:
				return errors.New("apply failed")
			}
			return nil
		}}, nil
	}}
}
