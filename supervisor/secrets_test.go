package supervisor_test

// The supervisor keeps secrets: coordrun's credentials never reach a job,
// the records show a job's command name unless told otherwise, and with
// credentials the records (cron output included) are readable only by the
// identities that wrote them unless --acl grants read to others.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/state"
	"github.com/go-zookeeper/zk"
)

// The secrets the tests hand coordrun and then look for where they must
// not be.
const (
	envSecret  = "envS3cretPW"
	fileSecret = "fileS3cretPW"
	argSecret  = "--db-password=argS3cretPW"
)

// A job's environment holds no credential of coordrun's, whether it came
// from COORDRUN_AUTH or from auth: in a config file; the lock's variables
// are there. A config file with auth: that others may read is refused.
func TestE2EJobEnvHasNoCredentials(t *testing.T) {
	b := sharedCoordrun(t)
	r := newRig(t, b)
	conf := r.path("secret.yaml")
	if err := os.WriteFile(conf, []byte("auth: [ops:"+fileSecret+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		env   []string
		flags []string
	}{
		{"env", []string{"COORDRUN_AUTH=ops:" + envSecret}, nil},
		{"config", nil, []string{"--config", conf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := r.path("env-" + tc.name)
			// A root of its own: the first session with credentials
			// makes the folders it creates its own.
			root := "/secrets-" + randHex(4)
			p := r.superviseVia(b.serverArg(), tc.name, append(tc.flags, "--root", root), tc.env, "sh", "-c", "env > "+out)
			if code := p.Exit(t, 20*time.Second); code != 0 {
				t.Fatalf("coordrun run exited %d:\n%s", code, p.Out.String())
			}
			env, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range []string{"COORDRUN_AUTH=", envSecret, fileSecret} {
				if bytes.Contains(env, []byte(bad)) {
					t.Errorf("the job's environment holds %q:\n%s", bad, env)
				}
			}
			for _, want := range []string{"COORDRUN_FENCING_TOKEN=", "COORDRUN_LOCK=" + r.lock, "COORDRUN_LOCK_NODE=" + root + "/" + r.lock + "/lock-"} {
				if !bytes.Contains(env, []byte(want)) {
					t.Errorf("the job's environment lacks %q:\n%s", want, env)
				}
			}
		})
	}
	t.Run("config readable by others", func(t *testing.T) {
		open := r.path("open.yaml")
		if err := os.WriteFile(open, []byte("auth: [ops:"+fileSecret+"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(open, 0o644); err != nil {
			t.Fatal(err)
		}
		p := r.superviseVia(b.serverArg(), "open", []string{"--config", open}, nil, "true")
		code := p.Exit(t, 20*time.Second)
		if code != supervisor.ExitUsage || !strings.Contains(p.Out.String(), "chmod 600 "+open) {
			t.Errorf("run with auth: in a 0644 config file: exit %d, want %d naming chmod 600:\n%s", code, supervisor.ExitUsage, p.Out.String())
		}
	})
}

// A cron job that prints COORDRUN_AUTH prints nothing: the firing's kept
// output holds no credential, nor does its on-success hook's environment.
func TestCronOutputHasNoCredentials(t *testing.T) {
	b := sharedCoordrun(t)
	r := newRig(t, b)
	root, job := "/cron-secrets-"+randHex(4), "leaky"
	hookEnv := r.path("hook-env")
	p := r.startProc("c1", []string{"COORDRUN_AUTH=ops:" + envSecret}, e2eBin,
		cronProcArgs(b, root, job, "@every 1s", []string{"--on-success", "env > " + hookEnv + ".tmp && mv " + hookEnv + ".tmp " + hookEnv},
			[]string{"sh", "-c", "echo auth is $COORDRUN_AUTH."})...)
	owner := foreign(t, b)
	if err := owner.AddAuth("digest", []byte("ops:"+envSecret)); err != nil {
		t.Fatal(err)
	}
	rec := awaitDoneFiring(t, owner, root, job)
	if strings.Contains(rec.Output, envSecret) || !strings.Contains(rec.Output, "auth is .") {
		t.Errorf("the firing's output %q: want \"auth is .\" and no credential", rec.Output)
	}
	var env []byte
	testkit.WaitFor(t, 10*time.Second, "the on-success hook's environment", func() bool {
		var err error
		env, err = os.ReadFile(hookEnv)
		return err == nil
	})
	if bytes.Contains(env, []byte("COORDRUN_AUTH=")) || !bytes.Contains(env, []byte("COORDRUN_CRON_JOB="+job)) {
		t.Errorf("the hook's environment: want COORDRUN_CRON_JOB and no COORDRUN_AUTH:\n%s", env)
	}
	cronStopProcs(t, []*proc{p})
}

// awaitDoneFiring waits for a firing of job that ran to its end, read
// with conn, and returns its record.
func awaitDoneFiring(t *testing.T, conn *zk.Conn, root, job string) state.FiringRecord {
	t.Helper()
	var rec state.FiringRecord
	firings := path.Join(root, job, "firings")
	testkit.WaitFor(t, 20*time.Second, "a firing of "+job+" done", func() bool {
		kids, _, err := conn.Children(firings)
		if err != nil {
			return false
		}
		for _, k := range kids {
			data, _, err := conn.Get(path.Join(firings, k))
			if err == nil && json.Unmarshal(data, &rec) == nil && rec.State == state.FiringDone {
				return true
			}
		}
		return false
	})
	return rec
}

// The lock's queue node, the run node, `coordrun status`, and a cron job's
// definition and lock show the command's name only, unless
// --record-command full; each read by another client.
func TestE2ERecordCommand(t *testing.T) {
	b := sharedCoordrun(t)
	name := filepath.Base(e2eSelf)
	for _, tc := range []struct {
		flags []string
		full  bool
	}{{nil, false}, {[]string{"--record-command", "full"}, true}} {
		t.Run("full="+map[bool]string{false: "no", true: "yes"}[tc.full], func(t *testing.T) {
			want := func(what, got string) {
				t.Helper()
				if tc.full && !strings.Contains(got, argSecret) || !tc.full && got != name {
					t.Errorf("%s records the command %q; want %s", what, got, map[bool]string{false: "only " + name, true: "the whole command line"}[tc.full])
				}
			}
			r := newRig(t, b)
			gate := r.path("go")
			a := r.supervise("A", tc.flags, r.job("A", "-after", gate, "--", argSecret)...)
			r.await(10*time.Second, "start", "A", "")
			ls := r.awaitQueue(10*time.Second, 0)
			conn := foreign(t, b)
			for _, node := range []string{ls.Holder.Node, path.Join("/coordrun/locks", r.lock, recipe.RunNode)} {
				data, _, err := conn.Get(node)
				var info state.HolderInfo
				if err != nil || json.Unmarshal(data, &info) != nil {
					t.Fatalf("read %s: %v %q", node, err, data)
				}
				want(node, info.Command)
			}
			if st := r.statusJSON(); st.Holder == nil {
				t.Errorf("coordrun status shows no holder")
			} else {
				want("coordrun status", st.Holder.Info.Command)
			}
			r.touch("go")
			if code := a.Exit(t, 10*time.Second); code != 0 {
				t.Errorf("A exited %d", code)
			}

			root, job := "/cron-record-"+randHex(4), "nightly"
			p := r.startProc("c1", nil, e2eBin, cronProcArgs(b, root, job, "@every 1s", tc.flags, r.job("J", "-after", gate, "-hold", "1s", "--", argSecret))...)
			testkit.WaitFor(t, 20*time.Second, "the cron job's lock held", func() bool {
				_, _, err := conn.Get(path.Join(root, job, "lock", recipe.RunNode))
				return err == nil
			})
			data, _, err := conn.Get(path.Join(root, job, "lock", recipe.RunNode))
			var info state.HolderInfo
			if err != nil || json.Unmarshal(data, &info) != nil {
				t.Fatalf("read the cron job's run node: %v %q", err, data)
			}
			want("the cron job's run node", info.Command)
			data, _, err = conn.Get(path.Join(root, job))
			var def state.CronJobInfo
			if err != nil || json.Unmarshal(data, &def) != nil {
				t.Fatalf("read the cron job's definition: %v %q", err, data)
			}
			want("the cron job's definition", strings.Join(def.Command, " "))
			cronStopProcs(t, []*proc{p})
		})
	}
}

// With credentials, the records (the lock's nodes, a cron job's definition
// and its firings with their output) are readable only by the identities
// that wrote them: another client gets NOAUTH, `coordrun status` and
// `coordrun cron list` without credentials exit 64 saying what to do, and
// with them work. --acl world:anyone:r lets everyone read.
func TestE2ERecordsACL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		b.differs(t, "etcd has no per-key ACLs; who may read the records is its users' roles on the prefix")
		for _, tc := range []struct {
			name     string
			acl      []string
			readable bool
		}{{"default", nil, false}, {"world-read", []string{"--acl", "world:anyone:r"}, true}} {
			t.Run(tc.name, func(t *testing.T) {
				recordsACL(t, b, append([]string{"--auth", "ops:" + envSecret}, tc.acl...), tc.readable)
			})
		}
	})
}

func recordsACL(t *testing.T, b *backend, flags []string, readable bool) {
	r := newRig(t, b)
	conn := foreign(t, b)
	owner := foreign(t, b)
	if err := owner.AddAuth("digest", []byte("ops:"+envSecret)); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		switch {
		case readable && err != nil:
			t.Errorf("another client reading %s: %v, want it readable", what, err)
		case !readable && !errors.Is(err, zk.ErrNoAuth):
			t.Errorf("another client reading %s: %v, want NOAUTH", what, err)
		}
	}
	gate := r.path("go")
	// A root of its own: the first session with credentials makes the
	// folders it creates its own.
	root := "/records-" + randHex(4)
	a := r.supervise("A", append(flags, "--root", root), r.job("A", "-after", gate)...)
	r.await(10*time.Second, "start", "A", "")
	dir := path.Join(root, r.lock)
	var queue []string
	testkit.WaitFor(t, 10*time.Second, "the holder's queue node", func() bool {
		queue, _, _ = owner.Children(dir)
		return len(queue) == 2 // its queue node and the run node
	})
	for _, k := range queue {
		_, _, err := conn.Get(path.Join(dir, k))
		check(path.Join(dir, k), err)
	}
	_, _, err := conn.Children(dir)
	check("the lock folder's children", err)

	status := func(args ...string) (string, int) {
		cmd := exec.Command(e2eBin, append([]string{"status", "--servers", b.serverArg(), "--root", root, r.lock}, args...)...)
		cmd.Env = append(baseEnv(), r.mark)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := status()
	switch {
	case readable && (code != 0 || !strings.Contains(out, "holder")):
		t.Errorf("status without credentials: exit %d, want the holder:\n%s", code, out)
	case !readable && (code != supervisor.ExitUsage || !strings.Contains(out, r.lock+"  unreadable") || !strings.Contains(out, "auth: user:password") || !strings.Contains(out, "--acl world:anyone:r")):
		t.Errorf("status without credentials: exit %d, want %d saying to give credentials:\n%s", code, supervisor.ExitUsage, out)
	}
	t.Logf("status without credentials: exit %d: %s", code, strings.TrimSpace(out))
	if out, code := status("--auth", "ops:"+envSecret); code != 0 || !strings.Contains(out, "holder") {
		t.Errorf("status with the writer's credentials: exit %d, want the holder:\n%s", code, out)
	}
	r.touch("go")
	if code := a.Exit(t, 10*time.Second); code != 0 {
		t.Errorf("A exited %d:\n%s", code, a.Out.String())
	}

	job := "nightly"
	root = "/cron-acl-" + randHex(4)
	p := r.startProc("c1", nil, e2eBin, cronProcArgs(b, root, job, "@every 1s", append(flags, "--zookeeper-margin", zkMargin.String()), []string{"sh", "-c", "echo the output"})...)
	rec := awaitDoneFiring(t, owner, root, job)
	if !strings.Contains(rec.Output, "the output") {
		t.Errorf("the firing's output %q, want \"the output\"", rec.Output)
	}
	_, _, err = conn.Get(path.Join(root, job))
	check("the cron job's definition", err)
	firings := path.Join(root, job, "firings")
	kids, _, err := owner.Children(firings)
	if err != nil || len(kids) == 0 {
		t.Fatalf("the owner lists no firings: %v", err)
	}
	data, _, err := conn.Get(path.Join(firings, kids[0]))
	check("a firing's record (and its output)", err)
	if readable && !strings.Contains(string(data), "the output") {
		t.Errorf("the firing record another client read: %q, want the output", data)
	}
	cmd := exec.Command(e2eBin, "cron", "list", "--servers", b.serverArg(), "--root", root)
	cmd.Env = append(baseEnv(), r.mark)
	lout, _ := cmd.CombinedOutput()
	switch code := cmd.ProcessState.ExitCode(); {
	case readable && (code != 0 || !strings.Contains(string(lout), job)):
		t.Errorf("cron list without credentials: exit %d, want the job:\n%s", code, lout)
	case !readable && (code != supervisor.ExitUsage || !strings.Contains(string(lout), "--auth")):
		t.Errorf("cron list without credentials: exit %d, want %d naming --auth:\n%s", code, supervisor.ExitUsage, lout)
	}
	cronStopProcs(t, []*proc{p})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The owner's own listing works in both cases.
	oc, err := client.Connect(ctx, client.Config{Servers: b.servers, Auth: []client.Auth{{Scheme: "digest", Secret: []byte("ops:" + envSecret)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if jobs, _, err := supervisor.CronJobs(ctx, store(oc), root); err != nil || len(jobs) != 1 {
		t.Errorf("the owner's cron listing: %v, %v", jobs, err)
	}
}

// The rules, without an ensemble: what --acl adds to the writers' own
// entries, what a record keeps of a command line, and which variables a
// job never sees.
func TestRecordRules(t *testing.T) {
	argv := []string{"/opt/jobs/dump.sh", argSecret}
	if got := supervisor.RecordedCommand(argv, false); !slices.Equal(got, []string{"dump.sh"}) {
		t.Errorf("recorded command %q, want [dump.sh]", got)
	}
	if got := supervisor.RecordedCommand(argv, true); !slices.Equal(got, argv) {
		t.Errorf("recorded full command %q, want %q", got, argv)
	}
	env := supervisor.JobEnv([]string{"COORDRUN_AUTH=ops:pw", "COORDRUN_PEER_SECRET_FILE=/s", "COORDRUN_TLS_KEY_PASSPHRASE=x",
		"COORDRUN_SERVERS=a:1", "COORDRUN_FENCING_TOKEN=7", "AUTH=mine", "PATH=/bin"})
	if want := []string{"COORDRUN_SERVERS=a:1", "COORDRUN_FENCING_TOKEN=7", "AUTH=mine", "PATH=/bin"}; !slices.Equal(env, want) {
		t.Errorf("JobEnv = %q, want %q", env, want)
	}
}
