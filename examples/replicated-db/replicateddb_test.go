package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
)

// TestReplicatedDBFailover runs three replicated-db processes against a
// three-member coordrun ensemble, kills the leader with SIGKILL while
// writes go on, and checks that another leader serves writes, that no
// acknowledged write is lost, and that the restarted node has every
// acknowledged write before it serves a read or shows as live.
func TestReplicatedDBFailover(t *testing.T) {
	servers := ensembletest.Start(t, 3).Servers()
	bin := buildExample(t)
	const sessionTimeout = 2 * time.Second
	var nodes []*dbProc
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startDB(t, bin, fmt.Sprint("n", i), testkit.FreeAddrs(t, "127.0.0.1", 1)[0], servers, sessionTimeout))
	}
	leader := awaitCluster(t, nodes, "", 3)
	var followers []*dbProc
	for _, n := range nodes {
		if n.name != leader.name {
			followers = append(followers, n)
		}
	}
	t.Logf("leader %s, followers %s and %s", leader.name, followers[0].name, followers[1].name)

	acked := &ackLog{m: map[string]string{}}
	for i := 0; i < 10; i++ {
		acked.mustPut(t, followers[0], fmt.Sprint("via-follower-", i))
		acked.mustPut(t, leader, fmt.Sprint("via-leader-", i))
	}

	// Writes go on through a follower while the leader dies; those
	// acknowledged must survive, the others may or may not.
	stopWriter := make(chan struct{})
	writerDone := make(chan int)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for tries := 0; ; tries++ {
			acked.tryPut(followers[1], fmt.Sprint("during-", tries))
			select {
			case <-stopWriter:
				writerDone <- tries + 1
				return
			case <-tick.C:
			}
		}
	}()
	acked.await(t, func(n int) bool { return n >= 30 }, "writes through the follower before the kill")

	killed := time.Now()
	leader.kill()
	next := awaitCluster(t, followers, leader.name, 2)
	// The new leader serves writes.
	acked.mustPut(t, next, "first-after-kill")
	t.Logf("kill -9 of leader %s → new leader %s serving writes: %v", leader.name, next.name, time.Since(killed).Round(time.Millisecond))
	for i := 0; i < 10; i++ {
		for _, n := range followers {
			acked.mustPut(t, n, fmt.Sprintf("after-kill-%s-%d", n.name, i))
		}
	}
	close(stopWriter)
	t.Logf("%d writes attempted during the failover", <-writerDone)
	for _, n := range followers {
		acked.check(t, n)
	}

	// The killed node comes back on its address: it copies the data
	// before it serves reads and before it shows as live.
	restarted := startDB(t, bin, leader.name, leader.addr, servers, sessionTimeout)
	want := acked.snapshot()
	liveBy := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		if d, ok := restarted.dump(); ok {
			checkHas(t, restarted.name, d, want)
		}
		if v, ok := followers[0].cluster(); ok && contains(v.Live, restarted.name) {
			d, ok := restarted.dump()
			if !ok {
				t.Fatalf("%s is live but does not serve reads", restarted.name)
			}
			checkHas(t, restarted.name, d, want)
			break
		}
		if time.Now().After(liveBy) {
			t.Fatalf("%s not live within 30s", restarted.name)
		}
	}
	awaitCluster(t, []*dbProc{followers[0], followers[1], restarted}, "", 3)
	acked.mustPut(t, restarted, "via-restarted")
	for _, n := range []*dbProc{followers[0], followers[1], restarted} {
		acked.check(t, n)
	}
}

// ackLog records the acknowledged writes.
type ackLog struct {
	mu sync.Mutex
	m  map[string]string
}

var httpc = &http.Client{Timeout: 15 * time.Second}

// tryPut writes key once through n and records it if acknowledged.
func (a *ackLog) tryPut(n *dbProc, key string) bool {
	value := "value of " + key
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.addr+"/kv/"+key, strings.NewReader(value))
	resp, err := httpc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return false
	}
	a.mu.Lock()
	a.m[key] = value
	a.mu.Unlock()
	return true
}

// mustPut writes key through n, retrying refusals until a deadline.
func (a *ackLog) mustPut(t *testing.T, n *dbProc, key string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("write %s through %s acknowledged", key, n.name), func() bool { return a.tryPut(n, key) })
}

func (a *ackLog) snapshot() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]string, len(a.m))
	for k, v := range a.m {
		out[k] = v
	}
	return out
}

func (a *ackLog) await(t *testing.T, cond func(int) bool, what string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, what, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return cond(len(a.m))
	})
}

// check reads every acknowledged key from n.
func (a *ackLog) check(t *testing.T, n *dbProc) {
	t.Helper()
	d, ok := n.dump()
	if !ok {
		t.Fatalf("%s serves no reads", n.name)
	}
	want := a.snapshot()
	checkHas(t, n.name, d, want)
	t.Logf("%s holds all %d acknowledged writes (%d keys, version %+v)", n.name, len(want), len(d.Data), d.Version)
}

func checkHas(t *testing.T, name string, d dump, want map[string]string) {
	t.Helper()
	var missing []string
	for k, v := range want {
		if d.Data[k] != v {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s lacks %d acknowledged writes: %v", name, len(missing), missing)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// awaitCluster waits until every node in nodes shows the same leader,
// not notLeader, serving writes, and live members; it returns the
// leader's process.
func awaitCluster(t *testing.T, nodes []*dbProc, notLeader string, live int) *dbProc {
	t.Helper()
	var leader *dbProc
	var last []clusterView
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		last = last[:0]
		agreed := true
		leader = nil
		for _, n := range nodes {
			v, ok := n.cluster()
			last = append(last, v)
			if !ok || v.Leader.Name == "" || v.Leader.Name == notLeader || len(v.Live) != live || v.Leader.Name != last[0].Leader.Name {
				agreed = false
				continue
			}
			if v.Name == v.Leader.Name {
				if v.Role != roleLeader || !v.Serving {
					agreed = false
				}
				leader = n
			} else if v.Role != roleFollower {
				agreed = false
			}
		}
		if agreed && leader != nil {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not settled within 30s: %+v", last)
		}
	}
}

// dbProc is one replicated-db process.
type dbProc struct {
	name, addr string
	proc       *testkit.Process
	log        string
}

func startDB(t *testing.T, bin, name, addr string, servers []string, sessionTimeout time.Duration) *dbProc {
	t.Helper()
	p := &dbProc{name: name, addr: addr, log: filepath.Join(t.TempDir(), name+".log")}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-name", name, "-http", addr, "-servers", strings.Join(servers, ","),
		"-root", "/replicated-db-test", "-session-timeout", sessionTimeout.String(), "-v")
	cmd.Stdout, cmd.Stderr = out, out
	p.proc, err = testkit.StartProcess(cmd)
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("log of %s:\n%s", name, lastLines(string(b), 40))
		}
	})
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill sends SIGKILL and reaps the process.
func (p *dbProc) kill() {
	p.proc.Kill()
}

var pollc = &http.Client{Timeout: 2 * time.Second}

func (p *dbProc) getJSON(path string, v any) bool {
	resp, err := pollc.Get("http://" + p.addr + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false
	}
	return json.NewDecoder(bytes.NewReader(b)).Decode(v) == nil
}

func (p *dbProc) cluster() (clusterView, bool) {
	var v clusterView
	ok := p.getJSON("/cluster", &v)
	return v, ok
}

func (p *dbProc) dump() (dump, bool) {
	var d dump
	ok := p.getJSON("/kv", &d)
	return d, ok
}

// buildExample builds this package's binary for the test.
func buildExample(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "replicated-db")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
