package statuspage

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Health words, worst last.
const (
	HealthHealthy     = "healthy"     // a leader, every member reachable and caught up
	HealthDegraded    = "degraded"    // a leader and a quorum, but a member is down or behind
	HealthUnavailable = "unavailable" // no leader, or no quorum reachable: writes fail
)

// maxHealthyLag is how many log entries a member may be behind the
// leader's commit index and still count as caught up: a busy ensemble is
// always a few entries behind somewhere.
const maxHealthyLag = 100

// EnsembleView is the ensemble as the serving member sees it.
type EnsembleView struct {
	// Health is one word (HealthHealthy, ...), Reason why it is not
	// healthy.
	Health  string       `json:"health"`
	Reason  string       `json:"reason,omitempty"`
	Leader  string       `json:"leader"`
	Self    string       `json:"self"`
	Members []MemberView `json:"members"`
}

// MemberView is one member's line.
type MemberView struct {
	ID           string `json:"id"`
	Role         string `json:"role"`
	Leader       bool   `json:"leader,omitempty"`
	Self         bool   `json:"self,omitempty"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Lag is how far the member's applied index is behind the leader's
	// commit index (the highest commit index reported, without a
	// leader).
	Lag        uint64    `json:"lag"`
	Reachable  bool      `json:"reachable"`
	Error      string    `json:"error,omitempty"`
	ClientAddr string    `json:"client_addr,omitempty"`
	PeerAddr   string    `json:"peer_addr"`
	Started    time.Time `json:"started,omitzero"`
	Sessions   int       `json:"sessions"`
	Znodes     int       `json:"znodes"`
	Alarms     []string  `json:"alarms,omitempty"`
}

// ensembleView judges the reports: self is the serving member's id.
func ensembleView(self string, reports []MemberReport) EnsembleView {
	v := EnsembleView{Self: self, Members: make([]MemberView, 0, len(reports))}
	var leaderCommit, maxCommit uint64
	for _, r := range reports {
		if r.ID == self {
			v.Leader = r.Leader
		}
	}
	for _, r := range reports {
		if r.Error != "" {
			continue
		}
		maxCommit = max(maxCommit, r.CommitIndex)
		if r.Role == "leader" {
			if v.Leader == "" {
				v.Leader = r.ID
			}
			if r.ID == v.Leader {
				leaderCommit = r.CommitIndex
			}
		}
	}
	ref := leaderCommit
	if ref == 0 {
		ref = maxCommit
	}
	reachable := 0
	var down, behind, alarms []string
	for _, r := range reports {
		m := MemberView{
			ID: r.ID, Role: r.Role, Leader: r.ID == v.Leader && v.Leader != "", Self: r.ID == self,
			Term: r.Term, CommitIndex: r.CommitIndex, AppliedIndex: r.AppliedIndex,
			Reachable: r.Error == "", Error: r.Error, ClientAddr: r.ClientAddr, PeerAddr: r.PeerAddr,
			Started: r.Started, Sessions: r.Sessions, Znodes: r.Znodes, Alarms: r.Alarms,
		}
		for _, a := range r.Alarms {
			alarms = append(alarms, r.ID+": "+a)
		}
		if m.Reachable {
			reachable++
			if ref > r.AppliedIndex {
				m.Lag = ref - r.AppliedIndex
			}
			if m.Lag > maxHealthyLag {
				behind = append(behind, fmt.Sprintf("%s (%d behind)", r.ID, m.Lag))
			}
		} else {
			m.Role = "unreachable"
			down = append(down, r.ID)
		}
		v.Members = append(v.Members, m)
	}
	slices.SortStableFunc(v.Members, func(a, b MemberView) int { return compareIDs(a.ID, b.ID) })
	n := len(reports)
	switch {
	case v.Leader == "":
		v.Health, v.Reason = HealthUnavailable, "no leader known"
	case reachable <= n/2:
		v.Health, v.Reason = HealthUnavailable, fmt.Sprintf("%d of %d members reachable: no quorum", reachable, n)
	case len(down) > 0 || len(behind) > 0 || len(alarms) > 0:
		v.Health = HealthDegraded
		var parts []string
		if len(down) > 0 {
			parts = append(parts, "unreachable: "+strings.Join(down, ", "))
		}
		if len(behind) > 0 {
			parts = append(parts, "behind: "+strings.Join(behind, ", "))
		}
		if len(alarms) > 0 {
			parts = append(parts, "alarms: "+strings.Join(alarms, "; "))
		}
		v.Reason = strings.Join(parts, "; ")
	default:
		v.Health = HealthHealthy
	}
	return v
}

// compareIDs orders member ids as numbers when both are, else as text.
func compareIDs(a, b string) int {
	if len(a) != len(b) && allDigits(a) && allDigits(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
