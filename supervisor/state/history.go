package state

import (
	"slices"
	"sort"
	"time"
)

// PruneHorizon is how long a firing's record is kept whatever the history
// setting: the record is what stops a host whose clock lags from running
// the firing again, so host clocks must agree to within this.
const PruneHorizon = time.Hour

// HistoryLimits say how many firing records a job keeps: Total of every
// kind, counted by name alone; and, when set (non-zero), Success of runs
// that exited 0 and Failed of the firings that ended otherwise (failed,
// lost, timed-out, replaced, unreadable). Skipped and paused firings
// count toward the total only, and a record still claimed or running is
// never pruned by the kind limits.
type HistoryLimits struct{ Total, Success, Failed int }

// ByKind says whether the limits need the records read.
func (l HistoryLimits) ByKind() bool { return l.Success > 0 || l.Failed > 0 }

// Slack is how many records past the last count by kind are let in before
// the next count reads them all again, so that the reads cost a tenth of a
// read per firing.
func (l HistoryLimits) Slack() int { return max(1, (l.Success+l.Failed)/10) }

// KeptFrom is the scheduled time before which records may be pruned:
// every record younger than the horizon (or the catch-up window, if
// longer) is kept, and a firing this old is not run again.
func KeptFrom(now time.Time, catchUp time.Duration) time.Time {
	return now.Add(-max(PruneHorizon, catchUp))
}

// ExpiredByName chooses, of the record names in a job's firings folder,
// those beyond the newest Total, scheduled before oldest; rest are the
// others, sorted.
func (l HistoryLimits) ExpiredByName(names []string, oldest time.Time) (drop, rest []string) {
	names = slices.Clone(names)
	sort.Strings(names)
	if len(names) <= l.Total {
		return nil, names
	}
	n := 0
	for _, k := range names[:len(names)-l.Total] {
		if secs, ok := FiringSecond(k); !ok || secs >= oldest.Unix() {
			break
		}
		n++
	}
	return names[:n], names[n:]
}

// CountDue says whether the records must be read and counted by kind:
// the limits are by kind, more than the slack has come since the last
// count left counted records (-1 before the first), and there are more
// than the smaller limit.
func (l HistoryLimits) CountDue(n, counted int) bool {
	return l.ByKind() && (counted < 0 || n >= counted+l.Slack()) && n > min(l.Success, l.Failed)
}

// StoredFiring is a firing's record as read, with its name and the
// version it was read at (an opaque precondition for its delete).
type StoredFiring struct {
	Name    string
	Version int64
	Rec     FiringRecord
}

// ExpiredByKind chooses the records (given oldest first) the kind limits
// drop: the oldest of each kind beyond its limit, among those scheduled
// before oldest; the newer ones count but stay.
func (l HistoryLimits) ExpiredByKind(recs []StoredFiring, oldest time.Time) []StoredFiring {
	var drop []StoredFiring
	seen := map[HistoryKind]int{}
	limit := map[HistoryKind]int{KindSuccess: l.Success, KindFailed: l.Failed}
	for i := len(recs) - 1; i >= 0; i-- {
		k := ResultOf(recs[i].Rec).Kind()
		if k == KindTotal || limit[k] == 0 {
			continue
		}
		seen[k]++
		secs, ok := FiringSecond(recs[i].Name)
		if seen[k] > limit[k] && ok && secs < oldest.Unix() {
			drop = append(drop, recs[i])
		}
	}
	slices.Reverse(drop)
	return drop
}
