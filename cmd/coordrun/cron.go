package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine/zkengine"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
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
	f.String("root", state.DefaultCronRoot, "znode folder of the cron jobs")
	f.String("schedule", "", "cron schedule of the job given on the command line")
	f.String("name", "", "job name (default: the command's base name)")
	f.String("tz", "", "time zone of the schedule (default: local)")
	f.String("overlap", state.OverlapSkip, "when the previous run is still going: skip, queue, or replace (stop it, then start)")
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
	if err := useEtcd(cmd, v, &sc.conn, "cron"); err != nil {
		signal.Stop(sc.job.Signals)
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

// storeOf is c as the supervisor's engine sees it. What the cron
// commands create (a pause, a request) gets the ACL of the folder it is
// made in, which the job's hosts made.
func storeOf(c *client.Client) *zkengine.Conn {
	return zkengine.New(c, zkengine.Options{InheritACL: true})
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
