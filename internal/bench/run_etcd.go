package main

// The run workload on etcd: handoff through the real `coordrun run` binary
// with --servers etcd://..., beside the same workload on coordrun and
// ZooKeeper (lock_handoff.go), so that the three engines' p50 come from
// one binary, one job and one run.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runServers is the --servers value of `coordrun run` on s: member
// addresses, with the etcd:// scheme on etcd.
func runServers(s *system) string {
	if s.name != "etcd" {
		return strings.Join(s.addrs(), ",")
	}
	var out []string
	for _, a := range s.addrs() {
		out = append(out, "etcd://"+a)
	}
	return strings.Join(out, ",")
}

// runHandoffOn is the run workload on any system.
func runHandoffOn(ctx context.Context, e *lockEnv, s *system, name string, n int) (handoffResult, error) {
	if s.name == "etcd" {
		return runHandoffEtcd(ctx, e, s, name, n)
	}
	return runHandoff(ctx, e, s, name, n)
}

// runHandoffEtcd is runHandoff on etcd. The queue cannot be held by a
// key the harness makes (the engine judges its head by its lease), so
// the gate is a supervisor too: its job waits for a file. Once the n
// supervisors have joined behind it, the file appears, the gate's job
// ends, and the handoffs between the n stamped jobs are measured. etcd
// says nothing of the watch notifications it sends (-1), and a lost
// wake-up shows as a run that does not end in time.
func runHandoffEtcd(ctx context.Context, e *lockEnv, s *system, name string, n int) (handoffResult, error) {
	res := handoffResult{Workload: "handoff", System: s.name, Waiters: n, Notifications: -1}
	cli, err := etcdClient(s.addrs()...)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	queue := lockRoot + "/" + name + "/lock-"
	argv := func(job ...string) []string {
		a := []string{e.bin, "run", "-q", "--servers", runServers(s), "--name", name, "--session-timeout", "10s", "--"}
		return append(a, job...)
	}
	gateFile := filepath.Join(e.dir, fmt.Sprintf("gate-%s-%d", name, e.seq))
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
	}()
	queued := func(want int64) error {
		return poll(ctx, 60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d supervisors queued on %s", want, s.name), func() (bool, error) {
			for _, p := range procs {
				if p.exited() {
					return false, fmt.Errorf("%s exited before the gate opened: %v\n%s", p.name, p.exitErr, logTail(p.logPath, 10))
				}
			}
			resp, err := cli.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count >= want, err
		})
	}
	out, log := e.files(fmt.Sprintf("%s-%s-gate", s.name, name))
	gate, err := startJobProc("gate "+name, out, log, nil, argv("sh", "-c", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.002; done", gateFile))...)
	if err != nil {
		return res, err
	}
	procs = append(procs, gate)
	if err := queued(1); err != nil {
		return res, err
	}
	outs := make([]string, 0, n)
	for i := range n {
		out, log := e.files(fmt.Sprintf("%s-%s-%d", s.name, name, i))
		p, err := startJobProc(fmt.Sprintf("supervisor %s #%d", name, i), out, log, e.stamp.env, argv(e.stamp.path)...)
		if err != nil {
			return res, err
		}
		procs, outs = append(procs, p), append(outs, out)
	}
	if err := queued(int64(n) + 1); err != nil {
		return res, err
	}
	released := time.Now()
	if err := os.WriteFile(gateFile, nil, 0o644); err != nil {
		return res, err
	}
	deadline := time.Now().Add(30*time.Second + time.Duration(n)*time.Second)
	for _, p := range procs {
		if err := waitDone(ctx, p, deadline); err != nil {
			return res, err
		}
	}
	var spans []stamp
	for i, out := range outs {
		p := procs[i+1]
		if p.exitErr != nil {
			return res, fmt.Errorf("%s: %v\n%s", p.name, p.exitErr, logTail(p.logPath, 10))
		}
		st, ok := readStamp(out)
		if !ok {
			return res, fmt.Errorf("%s: job wrote no stamp\n%s", p.name, logTail(p.logPath, 10))
		}
		spans = append(spans, st)
	}
	res.summarize(spans, released)
	return res, nil
}
