package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

const cronLong = `Run jobs on a schedule across hosts: start the same coordrun cron on every
host, and each scheduled firing runs exactly once, on one host.

A firing is identified by its job and its scheduled time. When a host's clock
reaches it, the host claims it in the ensemble; only the first claim succeeds,
so a host whose clock lags, or that restarts, never runs a firing again.

Schedules use cron syntax with optional seconds ("*/5 * * * *",
"0 30 3 * * *"), descriptors (@hourly, @daily, @every 10m) and CRON_TZ= or
--tz for the time zone. Many jobs come from a YAML file with --jobs:

  jobs:
    - name: nightly
      schedule: "0 3 * * *"
      command: /usr/local/bin/nightly.sh      # a string runs through sh -c
      tz: Europe/Berlin
      overlap: skip                          # or queue, or replace
      catch-up: 1h
      history: 100
      retry-lost: 1                          # run again if lost with its host
      retry-failed: 2                        # run again if it exits non-zero,
      retry-backoff: 5m                      #   this long after
      on-failure: /usr/local/bin/page-oncall # the record as JSON on stdin
      max-runtime: 2h                        # stopped and recorded timed-out after
      jitter: 5m                             # start up to 5m late, alike on every host
      output-bytes: 65536                    # end of the output kept with each record

The job runs like under coordrun run, with COORDRUN_SCHEDULED_TIME and
COORDRUN_ATTEMPT added. A firing whose host dies while it runs (or waits
for the lock) is recorded lost by another host once the dead host's
session ends; with retry-lost N, one other host runs it again, up to N
times, with a new fencing token and COORDRUN_ATTEMPT=2, 3, ...
SIGHUP reads a jobs file again: new and changed jobs are scheduled, dropped
ones no longer; running firings go on; a bad file is refused with its line
and the old jobs keep running.

--check checks the jobs (file) and prints each job's next firing, without
connecting, like nginx -t.

Under systemd (NOTIFY_SOCKET set, Type=notify) coordrun cron sends READY=1
once it is connected and every job is registered: a start with a bad jobs
file fails with the file's line and reason.

Exit codes: 0 after SIGTERM/SIGINT (running jobs get the signal and are
waited for), 76 when the session was lost, 64 for bad usage, schedules or
job files (a missing one included), 69 when no ensemble member answered
within the connect timeout.`

func newCronCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cron (--schedule SPEC -- command... | --jobs FILE)",
		Short: "Run scheduled jobs across hosts, each firing exactly once",
		Long:  cronLong,
		Args:  cobra.ArbitraryArgs,
		RunE:  runCron,
	}
	addSessionFlags(cmd)
	f := cmd.Flags()
	f.String("root", "/coordrun/cron", "znode folder of the cron jobs")
	f.String("schedule", "", "cron schedule of the job given on the command line")
	f.String("name", "", "job name (default: the command's base name)")
	f.String("tz", "", "time zone of the schedule (default: local)")
	f.String("overlap", supervisor.OverlapSkip, "when the previous run is still going: skip, queue, or replace (stop it, then start)")
	f.Duration("catch-up", 0, "at start, run the latest missed firing if it is younger than this (0: never)")
	f.Int("history", 100, "firing records kept per job")
	f.Int("history-success", 0, "also keep at most this many records of runs that exited 0 (0: no separate limit)")
	f.Int("history-failed", 0, "also keep at most this many records of firings that failed, were lost, timed out or were replaced (0: no separate limit)")
	f.Int("retry-lost", 0, "times a firing lost with its host is run again on another host")
	f.Int("retry-failed", 0, "times a run that exited non-zero is run again, on whichever host takes the retry")
	f.Duration("retry-backoff", 10*time.Second, "how long after a failed run its retry starts")
	f.String("on-success", "", "command (through sh -c) run on the host that saw a run exit 0; the record as JSON on stdin, COORDRUN_CRON_* in the environment")
	f.String("on-failure", "", "command (through sh -c) run on the host that saw a firing fail for good, be lost for good or time out")
	f.Int("output-bytes", 64<<10, "keep this much of the end of each run's output (stdout and stderr) with its record (0: none)")
	f.Duration("jitter", 0, "start each firing up to this long after its time, by an offset every host computes alike (0: none)")
	f.Duration("max-runtime", 0, "stop a run that has gone on this long (TERM, then KILL after the kill grace) and record it timed-out (0: no limit)")
	f.String("jobs", "", "YAML file of jobs")
	f.String("metrics-addr", "", "serve Prometheus metrics per job at http://ADDR/metrics")
	f.String("textfile", "", "also write the metrics to DIR/coordrun_cron_<jobs file or job>.prom, for node_exporter's textfile collector")
	f.Bool("check", false, "check the jobs and print their next firings, then exit (0: fine, 64: the problem)")
	cmd.AddCommand(newCronHistoryCommand(), newCronListCommand(), newCronPauseCommand(true), newCronPauseCommand(false),
		newCronTriggerCommand(), newCronBackfillCommand())
	return cmd
}

func runCron(cmd *cobra.Command, args []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	var jobs []*supervisor.CronJob
	switch file := v.GetString("jobs"); {
	case file != "" && (len(args) > 0 || v.GetString("schedule") != ""):
		return usageError{errors.New("give either --jobs FILE or --schedule SPEC -- command, not both")}
	case file != "":
		if jobs, err = loadJobsFile(file); err != nil {
			return usageError{err}
		}
	default:
		if len(args) == 0 || v.GetString("schedule") == "" {
			return usageError{errors.New("need --schedule SPEC -- command..., or --jobs FILE")}
		}
		j := &supervisor.CronJob{
			Name:    v.GetString("name"),
			Spec:    v.GetString("schedule"),
			TZ:      v.GetString("tz"),
			Argv:    args,
			Overlap: v.GetString("overlap"),
			CatchUp: v.GetDuration("catch-up"),
			History: v.GetInt("history"),

			HistorySuccess: v.GetInt("history-success"),
			HistoryFailed:  v.GetInt("history-failed"),

			RetryLost:    v.GetInt("retry-lost"),
			RetryFailed:  v.GetInt("retry-failed"),
			RetryBackoff: v.GetDuration("retry-backoff"),
			OnSuccess:    shellHook(v.GetString("on-success")),
			OnFailure:    shellHook(v.GetString("on-failure")),
			MaxRuntime:   v.GetDuration("max-runtime"),
			Jitter:       v.GetDuration("jitter"),
			OutputBytes:  v.GetInt("output-bytes"),
		}
		if v.GetBool("shell") {
			j.Argv = []string{"/bin/sh", "-c", strings.Join(args, " ")}
		}
		if j.Name == "" {
			j.Name = supervisor.DefaultName(args, v.GetBool("shell"))
		}
		jobs = []*supervisor.CronJob{j}
	}
	// Check every job before connecting: a bad schedule starts nothing.
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return usageError{err}
		}
	}
	if v.GetBool("check") {
		return printCronCheck(cmd.OutOrStdout(), v.GetString("jobs"), jobs, time.Now())
	}
	sc, err := sessionOptions(cmd, v)
	if err != nil {
		return err
	}
	var reload func() ([]*supervisor.CronJob, error)
	if file := v.GetString("jobs"); file != "" {
		// SIGHUP (systemctl reload) reads the file again.
		reload = func() ([]*supervisor.CronJob, error) { return loadJobsFile(file) }
	}
	metrics, stopMetrics, err := cronMetrics(v, jobs)
	if err != nil {
		return usageError{err}
	}
	defer stopMetrics()
	defer signal.Stop(sc.job.Signals)
	return exitFrom(supervisor.RunCron(context.Background(), supervisor.CronOptions{
		ConnOptions: sc.conn,
		JobOptions:  sc.job,
		Log:         sc.log,
		Root:        v.GetString("root"),
		Jobs:        jobs,
		Metrics:     metrics,
		Reload:      reload,
		Ready: func() {
			// Outside systemd (no NOTIFY_SOCKET) this sends nothing.
			status := fmt.Sprintf("scheduling %d %s", len(jobs), plural(len(jobs), "job", "jobs"))
			if f := v.GetString("jobs"); f != "" {
				status += " of " + f
			}
			if _, err := daemon.SdNotify(false, "READY=1\nSTATUS="+status); err != nil {
				sc.log.Warn("systemd notify failed", "err", err)
			}
		},
	}))
}

// cronMetrics sets up --metrics-addr and --textfile: the listener is
// bound before anything else starts, so a taken port is a usage error.
func cronMetrics(v *viper.Viper, jobs []*supervisor.CronJob) (*supervisor.CronMetrics, func(), error) {
	addr, dir := v.GetString("metrics-addr"), v.GetString("textfile")
	if addr == "" && dir == "" {
		return nil, func() {}, nil
	}
	file := ""
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, nil, fmt.Errorf("--textfile %s: not a directory", dir)
		}
		// Named after the jobs file, or the job: one file per cron
		// process, stable across restarts.
		name := jobs[0].Name
		if f := v.GetString("jobs"); f != "" {
			name = strings.TrimSuffix(filepath.Base(f), filepath.Ext(f))
		}
		file = filepath.Join(dir, "coordrun_cron_"+name+".prom")
	}
	m := supervisor.NewCronMetrics(file)
	if addr == "" {
		return m, func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return m, func() { _ = srv.Close() }, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// printCronCheck prints what --check found: the jobs and their next
// firings.
func printCronCheck(w io.Writer, file string, jobs []*supervisor.CronJob, now time.Time) error {
	what := "command line"
	if file != "" {
		what = file
	}
	fmt.Fprintf(w, "%s: %d %s, fine\n", what, len(jobs), plural(len(jobs), "job", "jobs"))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tNEXT")
	for _, j := range jobs {
		next := "never"
		if t := j.Next(now); !t.IsZero() {
			next = t.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", j.Name, j.Spec, next)
	}
	return tw.Flush()
}

// jobSpec is one entry of a jobs file.
type jobSpec struct {
	Name           string    `yaml:"name"`
	Schedule       string    `yaml:"schedule"`
	Command        yaml.Node `yaml:"command"`
	TZ             string    `yaml:"tz"`
	Overlap        string    `yaml:"overlap"`
	CatchUp        string    `yaml:"catch-up"`
	History        int       `yaml:"history"`
	HistorySuccess int       `yaml:"history-success"`
	HistoryFailed  int       `yaml:"history-failed"`
	RetryLost      int       `yaml:"retry-lost"`
	RetryFailed    int       `yaml:"retry-failed"`
	RetryBackoff   string    `yaml:"retry-backoff"`
	OnSuccess      yaml.Node `yaml:"on-success"`
	OnFailure      yaml.Node `yaml:"on-failure"`
	MaxRuntime     string    `yaml:"max-runtime"`
	Jitter         string    `yaml:"jitter"`
	OutputBytes    *int      `yaml:"output-bytes"`
}

// loadJobsFile reads a jobs file, naming the line of the first problem.
func loadJobsFile(file string) ([]*supervisor.CronJob, error) {
	b, err := os.ReadFile(file)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot read jobs file %s: %w", file, pe.Err)
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Jobs []yaml.Node `yaml:"jobs"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file", file)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs (want a top-level \"jobs:\" list)", file)
	}
	var out []*supervisor.CronJob
	seen := map[string]int{}
	for _, n := range doc.Jobs {
		at := func(format string, a ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n.Line, fmt.Sprintf(format, a...))
		}
		var s jobSpec
		if err := n.Decode(&s); err != nil {
			return nil, at("%v", err)
		}
		if err := checkJobKeys(&n); err != nil {
			return nil, fmt.Errorf("%s:%v", file, err)
		}
		if s.Name == "" {
			return nil, at("job without a name")
		}
		if line, dup := seen[s.Name]; dup {
			return nil, at("job %s already defined at line %d", s.Name, line)
		}
		seen[s.Name] = n.Line
		j := &supervisor.CronJob{Name: s.Name, Spec: s.Schedule, TZ: s.TZ, Overlap: s.Overlap, History: s.History, RetryLost: s.RetryLost,
			HistorySuccess: s.HistorySuccess, HistoryFailed: s.HistoryFailed,
			OutputBytes: 64 << 10}
		if s.OutputBytes != nil {
			j.OutputBytes = *s.OutputBytes
		}
		for _, hook := range []struct {
			key  string
			n    *yaml.Node
			argv *[]string
		}{{"on-success", &s.OnSuccess, &j.OnSuccess}, {"on-failure", &s.OnFailure, &j.OnFailure}} {
			switch hook.n.Kind {
			case yaml.ScalarNode:
				if strings.TrimSpace(hook.n.Value) != "" {
					*hook.argv = []string{"/bin/sh", "-c", hook.n.Value}
				}
			case yaml.SequenceNode:
				if err := hook.n.Decode(hook.argv); err != nil || len(*hook.argv) == 0 {
					return nil, at("job %s: %s: want a command", s.Name, hook.key)
				}
			case 0:
			default:
				return nil, at("job %s: %s must be a string or a list", s.Name, hook.key)
			}
		}
		j.RetryFailed, j.RetryBackoff = s.RetryFailed, 10*time.Second
		if s.RetryBackoff != "" {
			if j.RetryBackoff, err = time.ParseDuration(s.RetryBackoff); err != nil {
				return nil, at("job %s: retry-backoff: %v", s.Name, err)
			}
		}
		switch s.Command.Kind {
		case yaml.ScalarNode:
			if strings.TrimSpace(s.Command.Value) != "" {
				j.Argv = []string{"/bin/sh", "-c", s.Command.Value}
			}
		case yaml.SequenceNode:
			if err := s.Command.Decode(&j.Argv); err != nil {
				return nil, at("job %s: command: %v", s.Name, err)
			}
		case 0:
		default:
			return nil, at("job %s: command must be a string or a list", s.Name)
		}
		if s.CatchUp != "" {
			if j.CatchUp, err = time.ParseDuration(s.CatchUp); err != nil {
				return nil, at("job %s: catch-up: %v", s.Name, err)
			}
		}
		if s.Jitter != "" {
			if j.Jitter, err = time.ParseDuration(s.Jitter); err != nil {
				return nil, at("job %s: jitter: %v", s.Name, err)
			}
		}
		if s.MaxRuntime != "" {
			if j.MaxRuntime, err = time.ParseDuration(s.MaxRuntime); err != nil {
				return nil, at("job %s: max-runtime: %v", s.Name, err)
			}
		}
		if err := j.Validate(); err != nil {
			return nil, at("%v", err)
		}
		out = append(out, j)
	}
	return out, nil
}

// checkJobKeys rejects unknown keys in a job entry, with their line.
func checkJobKeys(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%d: a job must be a mapping", n.Line)
	}
	known := map[string]bool{}
	for f := range reflect.TypeFor[jobSpec]().Fields() {
		known[f.Tag.Get("yaml")] = true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !known[k.Value] {
			return fmt.Errorf("%d: unknown job key %q", k.Line, k.Value)
		}
	}
	return nil
}

func newCronHistoryCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history JOB",
		Short: "Show a job's firings: scheduled time, host, token, start, duration, exit code",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			v, c, ctx := s.v, s.c, s.ctx
			recs, err := supervisor.CronHistory(ctx, c, v.GetString("root"), args[0])
			if err != nil {
				return err
			}
			if n := v.GetInt("last"); n > 0 && len(recs) > n {
				recs = recs[len(recs)-n:]
			}
			if v.GetBool("json") {
				return writeJSON(cmd.OutOrStdout(), recs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULED\tSTATE\tATTEMPT\tHOST\tPID\tTOKEN\tSTART\tDURATION\tEXIT\tNOTE")
			for _, r := range recs {
				start, dur, exit := "", "", ""
				if !r.Start.IsZero() {
					start = r.Start.Local().Format(time.TimeOnly)
				}
				if !r.End.IsZero() && !r.Start.IsZero() {
					dur = r.End.Sub(r.Start).Round(time.Millisecond).String()
				}
				if r.ExitCode != nil {
					exit = fmt.Sprint(*r.ExitCode)
					if r.Signal != "" {
						exit += " (" + r.Signal + ")"
					}
				}
				note := r.Reason
				for _, l := range r.Earlier {
					what := "lost"
					if l.ExitCode != nil {
						what = fmt.Sprintf("exited %d", *l.ExitCode)
					}
					note += fmt.Sprintf("; attempt %d %s on %s (pid %d, token %d)", l.Attempt, what, l.Host, l.PID, l.Token)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Scheduled.Local().Format(time.DateTime), r.State,
					max(r.Attempt, 1), r.Host, r.PID, r.Token, start, dur, exit, strings.TrimPrefix(note, "; "))
				if v.GetBool("output") && r.OutputBytes > 0 {
					// The output breaks the table's columns: flush
					// before it, and indent it.
					if err := tw.Flush(); err != nil {
						return err
					}
					kept := ""
					if int64(len(r.Output)) < r.OutputBytes {
						kept = fmt.Sprintf(", the last %d kept", len(r.Output))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "    output (%d bytes%s):\n", r.OutputBytes, kept)
					for _, line := range strings.Split(strings.TrimRight(r.Output, "\n"), "\n") {
						fmt.Fprintf(cmd.OutOrStdout(), "    | %s\n", line)
					}
				}
			}
			return tw.Flush()
		}),
	}
	addInspectFlags(cmd, "/coordrun/cron", "znode folder")
	cmd.Flags().Int("last", 20, "show only the newest N firings (0: all)")
	cmd.Flags().Bool("output", false, "print each firing's kept output after its line")
	return cmd
}

// cronListEntry is one row of `coordrun cron list`.
type cronListEntry struct {
	supervisor.CronJobInfo
	Next   *time.Time               `json:"next,omitempty"`
	Last   *supervisor.FiringRecord `json:"last,omitempty"`
	Hosts  []supervisor.HolderInfo  `json:"hosts"`
	Paused *supervisor.CronControl  `json:"paused,omitempty"`
}

func newCronListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List cron jobs: schedule, last run, next firing, hosts taking part",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, s *clientSession) error {
			v, c, ctx := s.v, s.c, s.ctx
			jobs, hosts, err := supervisor.CronJobs(ctx, c, v.GetString("root"))
			if err != nil {
				return err
			}
			entries := []cronListEntry{}
			for _, j := range jobs {
				e := cronListEntry{CronJobInfo: j, Hosts: hosts[j.Name]}
				if s, err := supervisor.ParseSchedule(j.Schedule, j.TZ); err == nil {
					n := s.Next(time.Now())
					e.Next = &n
				}
				if recs, err := supervisor.CronHistory(ctx, c, v.GetString("root"), j.Name); err == nil && len(recs) > 0 {
					e.Last = &recs[len(recs)-1]
				}
				if e.Hosts == nil {
					e.Hosts = []supervisor.HolderInfo{}
				}
				e.Paused, _ = supervisor.CronPaused(ctx, c, v.GetString("root"), j.Name)
				entries = append(entries, e)
			}
			if v.GetBool("json") {
				return writeJSON(cmd.OutOrStdout(), entries)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSCHEDULE\tNEXT\tLAST\tSTATE\tHOST\tEXIT\tHOSTS")
			for _, e := range entries {
				next, last, state, host, exit := "", "", "", "", ""
				if e.Next != nil {
					next = e.Next.Local().Format(time.DateTime)
				}
				if e.Paused != nil {
					next = "paused by " + e.Paused.By
				}
				if e.Last != nil {
					last, state, host = e.Last.Scheduled.Local().Format(time.DateTime), string(e.Last.State), e.Last.Host
					if e.Last.ExitCode != nil {
						exit = fmt.Sprint(*e.Last.ExitCode)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.Name, e.Schedule, next, last, state, host, exit, len(e.Hosts))
			}
			return tw.Flush()
		}),
	}
	addInspectFlags(cmd, "/coordrun/cron", "znode folder")
	return cmd
}

// shellHook is a hook given on the command line: run through sh -c.
func shellHook(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return []string{"/bin/sh", "-c", s}
}

// requester names who asks for a pause or a run by hand: user@host.
func requester() string {
	host, _ := os.Hostname()
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return name + "@" + host
}

func newCronPauseCommand(pause bool) *cobra.Command {
	use, short := "resume JOB", "Resume a paused job: its firings run again"
	if pause {
		use, short = "pause JOB", "Pause a job on every host: its firings are recorded paused, not run"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			root, job := s.v.GetString("root"), args[0]
			var changed bool
			var err error
			if pause {
				changed, err = supervisor.PauseCron(s.ctx, s.c, root, job, requester())
			} else {
				changed, err = supervisor.ResumeCron(s.ctx, s.c, root, job)
			}
			if err != nil {
				return err
			}
			switch {
			case pause && changed:
				fmt.Fprintf(cmd.OutOrStdout(), "%s paused\n", job)
			case pause:
				fmt.Fprintf(cmd.OutOrStdout(), "%s was already paused\n", job)
			case changed:
				fmt.Fprintf(cmd.OutOrStdout(), "%s resumed\n", job)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not paused\n", job)
			}
			return nil
		}),
	}
	addInspectFlags(cmd, "/coordrun/cron", "znode folder")
	return cmd
}

func newCronTriggerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger JOB",
		Short: "Run a job once now, on one of its hosts, as a firing of its own (also while paused)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			now := time.Now().UTC().Truncate(time.Second)
			node, err := supervisor.RequestCron(s.ctx, s.c, s.v.GetString("root"), args[0],
				supervisor.CronRequest{Kind: "trigger", Times: []time.Time{now}, By: requester()})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s triggered for %s (%s); see coordrun cron history %s\n", args[0], now.Local().Format(time.DateTime), node, args[0])
			return nil
		}),
	}
	addInspectFlags(cmd, "/coordrun/cron", "znode folder")
	return cmd
}

// backfillLimit bounds the firings one backfill may ask for.
const backfillLimit = 1000

func newCronBackfillCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backfill JOB --from TIME --to TIME",
		Short: "Run each scheduled time of a range that has no record, once, oldest first (also while paused)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, s *clientSession) error {
			from, err := time.Parse(time.RFC3339, s.v.GetString("from"))
			if err != nil {
				return usageError{fmt.Errorf("--from: want an RFC 3339 time (2026-12-01T03:00:00Z): %v", err)}
			}
			to, err := time.Parse(time.RFC3339, s.v.GetString("to"))
			if err != nil {
				return usageError{fmt.Errorf("--to: want an RFC 3339 time (2026-12-01T03:00:00Z): %v", err)}
			}
			if to.Before(from) {
				return usageError{errors.New("--to is before --from")}
			}
			if to.After(time.Now()) {
				return usageError{errors.New("--to is in the future: backfill runs firings whose time has passed")}
			}
			root, job := s.v.GetString("root"), args[0]
			times, err := supervisor.MissedFirings(s.ctx, s.c, root, job, from, to, backfillLimit)
			if err != nil {
				return err
			}
			if len(times) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: every scheduled time from %s to %s has a record; nothing to run\n", job, from.Format(time.RFC3339), to.Format(time.RFC3339))
				return nil
			}
			if _, err := supervisor.RequestCron(s.ctx, s.c, root, job, supervisor.CronRequest{Kind: "backfill", Times: times, By: requester()}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d missed firings from %s to %s requested, oldest first\n", job, len(times),
				times[0].Format(time.RFC3339), times[len(times)-1].Format(time.RFC3339))
			return nil
		}),
	}
	addInspectFlags(cmd, "/coordrun/cron", "znode folder")
	cmd.Flags().String("from", "", "first scheduled time (RFC 3339)")
	cmd.Flags().String("to", "", "last scheduled time (RFC 3339)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
