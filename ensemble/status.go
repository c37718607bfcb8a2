package ensemble

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The status a member reports of itself, over the peer port to other
// members and through mbrs and `coordrun ensemble status` to operators.

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
	// GroupCommit: this member reads group entries (group.go); members
	// older than group commit do not send it.
	GroupCommit bool `json:"group_commit,omitempty"`
	// Started is when the member started; members older than the
	// status page do not send it.
	Started time.Time `json:"started,omitzero"`
	Error   string    `json:"error,omitempty"`
	// Alarms are conditions an operator must clear, such as a full disk
	// (storage.go); each says what and how to clear it.
	Alarms []string `json:"alarms,omitempty"`
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
		LastZxid:     m.fsm.lastZxid(),
		Leader:       string(leaderID),
		Sessions:     m.track.count(),
		Znodes:       nodes,
		GroupCommit:  !m.cfg.legacyEntries,
		Started:      m.started,
		Alarms:       m.alarms(),
	}
}

// ensembleStatus asks every member in the raft configuration for its
// status; unreachable members are reported with an error.
func (m *Member) ensembleStatus(ctx context.Context) Status {
	_, leaderID := m.raft.LeaderWithID()
	st := Status{Leader: string(leaderID)}
	cf := m.raft.GetConfiguration()
	if cf.Error() != nil {
		st.Members = []MemberStatus{m.localStatus()}
		return st
	}
	servers := cf.Configuration().Servers
	st.Members = make([]MemberStatus, len(servers))
	var wg sync.WaitGroup
	wg.Add(len(servers))
	for i, s := range servers {
		m.tr.Go(func() {
			defer wg.Done()
			if string(s.ID) == m.cfg.ID {
				st.Members[i] = m.localStatus()
				return
			}
			ms := MemberStatus{ID: string(s.ID), PeerAddr: string(s.Address)}
			payload, err := m.pool.call(ctx, string(s.Address), rpcStatus, nil)
			if err == nil {
				err = json.Unmarshal(payload, &ms)
			}
			if err != nil {
				ms.State = "unreachable"
				ms.Error = err.Error()
			}
			st.Members[i] = ms
		})
	}
	wg.Wait()
	return st
}

// counts are the tree's sizes as of the last applied batch.
func (m *Member) counts() (nodes, ephemerals int, dataSize int64) {
	return m.fsm.size()
}
