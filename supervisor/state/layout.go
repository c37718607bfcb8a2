package state

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// The folders coordrun keeps its state in, unless told otherwise (coordrun
// run --root, coordrun cron --root, the member's status page).
const (
	DefaultLockRoot = "/coordrun/locks"
	DefaultCronRoot = "/coordrun/cron"
)

// Layout names the folders a reader looks in: every lock is a child of
// LockRoot, every cron job one of CronRoot.
type Layout struct {
	LockRoot string
	CronRoot string
}

// DefaultLayout is the layout coordrun run and coordrun cron use by
// default.
func DefaultLayout() Layout { return Layout{LockRoot: DefaultLockRoot, CronRoot: DefaultCronRoot} }

// What cron keeps in the store, per job under the cron root:
//
//	<root>/<job>                    its definition (CronJobInfo, JSON)
//	<root>/<job>/firings/<unix s>   a firing's record (FiringRecord), created
//	                                by the host that claimed it
//	<root>/<job>/hosts/<host>       an ephemeral record per live host (HolderInfo)
//	<root>/<job>/lock               the lock the firings run under
//	<root>/<job>/paused             present while the job is paused (CronControl)
//	<root>/<job>/triggers/t-<seq>   a request to run the job now, to
//	                                backfill missed firings, or to retry a
//	                                failed run (CronRequest)

// CronPaths are the paths of one job's records.
type CronPaths struct{ Root, Job string }

func (p CronPaths) Dir() string      { return path.Join(p.Root, p.Job) }
func (p CronPaths) Firings() string  { return path.Join(p.Dir(), "firings") }
func (p CronPaths) Hosts() string    { return path.Join(p.Dir(), "hosts") }
func (p CronPaths) Lock() string     { return path.Join(p.Dir(), "lock") }
func (p CronPaths) Paused() string   { return path.Join(p.Dir(), "paused") }
func (p CronPaths) Triggers() string { return path.Join(p.Dir(), "triggers") }

// Firing is the record of the firing scheduled at t.
func (p CronPaths) Firing(t time.Time) string { return path.Join(p.Firings(), FiringName(t)) }

// FiringNamed is the firing record named name (FiringName, TriggeredName).
func (p CronPaths) FiringNamed(name string) string { return path.Join(p.Firings(), name) }

// Host is the record of a live host.
func (p CronPaths) Host(name string) string { return path.Join(p.Hosts(), name) }

// Trigger is the request named name ("t-<seq>").
func (p CronPaths) Trigger(name string) string { return path.Join(p.Triggers(), name) }

// TriggerPrefix starts every request's name; the store appends a
// sequence number.
const TriggerPrefix = "t-"

// FiringName names the record of the firing scheduled at t: its Unix
// second, zero-padded so that names sort as times.
func FiringName(t time.Time) string { return fmt.Sprintf("%013d", t.Unix()) }

// TriggeredName is the record of a firing requested by hand at t, with
// the request's sequence number: after a scheduled firing of the same
// second in name order, and never the same record.
func TriggeredName(t time.Time, seq string) string { return FiringName(t) + "-t" + seq }

// FiringSecond is the scheduled Unix second a record's name starts with.
func FiringSecond(name string) (int64, bool) {
	digits, _, _ := strings.Cut(name, "-")
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}
