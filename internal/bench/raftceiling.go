package main

// The bare raft ceiling (-systems raft): three hashicorp/raft nodes in this
// process with the library versions, stores and settings a coordrun member
// uses (raft-boltdb/v2 log and stable store in real bolt files, file
// snapshots, NetworkTransport over TCP on loopback, the raft.Config of
// ensemble/member.go), committing the log entry a setData of -value-size
// bytes becomes in coordrun. Client i is a goroutine calling
// Apply(entry).Error() on the leader in a loop; the FSM does nothing. What
// coordrun adds on top — the wire protocol, forwarding from followers, the
// znode tree, watches, sessions — is the difference to this row.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// raftConfig is coordrun's: keep in step with Member.startRaft in
// ensemble/member.go (heartbeat and election timeouts are the server's
// flag defaults).
func raftConfig(id string, log hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = log
	rc.HeartbeatTimeout = 300 * time.Millisecond
	rc.ElectionTimeout = 300 * time.Millisecond
	rc.LeaderLeaseTimeout = rc.HeartbeatTimeout / 2
	rc.CommitTimeout = 50 * time.Millisecond
	rc.MaxAppendEntries = 512
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = 8192
	rc.SnapshotInterval = 30 * time.Second
	rc.TrailingLogs = 4096
	rc.NoLegacyTelemetry = true
	return rc
}

// nopFSM applies nothing and snapshots nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nopSnapshot) Release()                             {}

// raftCluster is the three in-process nodes.
type raftCluster struct {
	log    hclog.Logger
	nodes  []*raft.Raft
	trans  []*raft.NetworkTransport
	stores []*raftboltdb.BoltStore
}

func startRaftCluster(ctx context.Context, dir string) (*raftCluster, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Error, Output: os.Stderr})
	rc := &raftCluster{log: log}
	var servers []raft.Server
	for i := 1; i <= 3; i++ {
		t, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 4, 5*time.Second, log)
		if err != nil {
			rc.stop()
			return nil, err
		}
		rc.trans = append(rc.trans, t)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprint(i)), Address: t.LocalAddr()})
	}
	for i := 1; i <= 3; i++ {
		d := filepath.Join(dir, fmt.Sprintf("r%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			rc.stop()
			return nil, err
		}
		store, err := raftboltdb.NewBoltStore(filepath.Join(d, "raft.db"))
		if err != nil {
			rc.stop()
			return nil, err
		}
		rc.stores = append(rc.stores, store)
		snaps, err := raft.NewFileSnapshotStoreWithLogger(d, 2, log)
		if err != nil {
			rc.stop()
			return nil, err
		}
		cfg := raftConfig(fmt.Sprint(i), log)
		if err := raft.BootstrapCluster(cfg, store, store, snaps, rc.trans[i-1], raft.Configuration{Servers: servers}); err != nil {
			rc.stop()
			return nil, err
		}
		// Like the member: recent entries cached for replication.
		logs, err := raft.NewLogCache(512, store)
		if err != nil {
			rc.stop()
			return nil, err
		}
		r, err := raft.NewRaft(cfg, nopFSM{}, logs, store, snaps, rc.trans[i-1])
		if err != nil {
			rc.stop()
			return nil, err
		}
		rc.nodes = append(rc.nodes, r)
	}
	if err := poll(ctx, 20*time.Second, 10*time.Millisecond, "bare raft leader", func() (bool, error) {
		return rc.leader() != nil, nil
	}); err != nil {
		rc.stop()
		return nil, err
	}
	return rc, nil
}

func (rc *raftCluster) leader() *raft.Raft {
	for _, r := range rc.nodes {
		if r.State() == raft.Leader {
			return r
		}
	}
	return nil
}

func (rc *raftCluster) stop() {
	rc.log.SetLevel(hclog.Off) // transports closing under each other is expected
	for _, r := range rc.nodes {
		_ = r.Shutdown().Error()
	}
	for _, t := range rc.trans {
		_ = t.Close()
	}
	for _, s := range rc.stores {
		_ = s.Close()
	}
}

// setDataEntry is the raft log entry coordrun makes of client i's setData
// of value.
func setDataEntry(i int, value []byte) ([]byte, error) {
	txn := tree.Txn{
		Kind:    tree.TxnOps,
		Session: 0x0100_0000_0000_0000 + int64(i),
		Time:    time.Now().UnixMilli(),
		Ops:     []tree.Op{{Kind: tree.OpSetData, Path: nodePath(i), Data: value, Version: -1}},
	}
	return txn.MarshalBinary()
}

// raftTarget drives the cluster's leader: every op is a write.
func (rc *raftCluster) target(value []byte) target {
	return target{name: "raft", open: func(ctx context.Context, i int) (worker, error) {
		entry, err := setDataEntry(i, value)
		if err != nil {
			return worker{}, err
		}
		return worker{close: func() {}, op: func(_ context.Context, write bool) error {
			if !write {
				return fmt.Errorf("bare raft serves writes only")
			}
			r := rc.leader()
			if r == nil {
				return raft.ErrNotLeader
			}
			return r.Apply(entry, 5*time.Second).Error()
		}}, nil
	}}
}
