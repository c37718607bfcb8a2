package testkit

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EtcdBin is where Debian's etcd-server puts the member binary.
const EtcdBin = "/usr/bin/etcd"

// EtcdctlBin is where Debian's etcd-client puts etcdctl.
const EtcdctlBin = "/usr/bin/etcdctl"

// RequireEtcd returns the etcd binary ($COORDRUN_ETCD, else EtcdBin).
// Without it the test skips, unless CI is set, where it fails: .ci/run
// installs it.
func RequireEtcd(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("COORDRUN_ETCD")
	if bin == "" {
		bin = EtcdBin
	}
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("etcd is required in CI (Debian: apt-get install etcd-server etcd-client): %v", err)
		}
		t.Skipf("etcd not installed (Debian: apt-get install etcd-server etcd-client): %v", err)
	}
	return bin
}

// EtcdMember is one etcd process of an EtcdCluster.
type EtcdMember struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	// AltClientURL is a second client address on 127.0.0.2, so that a
	// test can cut one client off (internal/netfault) and not another.
	AltClientURL string
	PeerURL      string
	Dir          string // data dir
	Proc         *Process
}

// EtcdCluster is etcd members run as processes on loopback, each with its
// own free ports and data dir, killed when the test ends.
type EtcdCluster struct {
	t       testing.TB
	bin     string
	initial string // --initial-cluster
	token   string
	Members []*EtcdMember

	// With TLS (StartEtcdTLS): the CA, the members' certificate, and a
	// client certificate the members accept.
	CA                    *CA
	serverCert, serverKey string
	ClientCert, ClientKey string
	clientTLS             *tls.Config
}

// StartEtcd starts n etcd members (1 or 3, say) and waits until every one
// of them reports itself healthy, which an etcd member does only once the
// cluster has a leader.
func StartEtcd(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	return startEtcd(t, n, nil)
}

// StartEtcdTLS is StartEtcd with the client port on TLS, certificates
// from ca, and client certificates required (ClientCert, ClientKey).
func StartEtcdTLS(t testing.TB, n int, ca *CA) *EtcdCluster {
	t.Helper()
	return startEtcd(t, n, ca)
}

func startEtcd(t testing.TB, n int, ca *CA) *EtcdCluster {
	t.Helper()
	bin := RequireEtcd(t)
	addrs := FreeAddrs(t, "127.0.0.1", 2*n)
	alt := FreeAddrs(t, "127.0.0.2", n)
	dir := t.TempDir()
	c := &EtcdCluster{t: t, bin: bin, token: fmt.Sprintf("coordrun-test-%d", time.Now().UnixNano()), CA: ca}
	scheme := "http://"
	if ca != nil {
		scheme = "https://"
		c.serverCert, c.serverKey = ca.Files(t, "etcd-member", ca.Issue(t, Loopback("etcd-member")))
		client := ca.Issue(t, Loopback("coordrun-client"))
		c.ClientCert, c.ClientKey = ca.Files(t, "etcd-client", client)
		c.clientTLS = ca.ClientTLS(client)
	}
	var initial []string
	for i := 0; i < n; i++ {
		m := &EtcdMember{
			Name:         fmt.Sprintf("e%d", i+1),
			ClientURL:    scheme + addrs[i],
			AltClientURL: scheme + alt[i],
			PeerURL:      "http://" + addrs[n+i],
			Dir:          filepath.Join(dir, fmt.Sprintf("e%d", i+1)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(initial, ",")
	for i := range c.Members {
		c.start(i, "new")
	}
	c.WaitHealthy(30 * time.Second)
	return c
}

func (c *EtcdCluster) start(i int, state string) {
	c.t.Helper()
	m := c.Members[i]
	args := []string{
		"--name", m.Name,
		"--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL + "," + m.AltClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-token", c.token,
		"--initial-cluster-state", state,
		"--logger", "zap", "--log-level", "warn"}
	if c.CA != nil {
		args = append(args, "--cert-file", c.serverCert, "--key-file", c.serverKey,
			"--client-cert-auth", "--trusted-ca-file", c.CA.File)
	}
	cmd := exec.Command(c.bin, args...)
	// etcd 3.4 reads ETCD_* variables as flags: keep the caller's out.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	m.Proc = Spawn(c.t, "etcd "+m.Name, cmd)
}

// Endpoints is every member's client URL.
func (c *EtcdCluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Servers is the --servers value naming every member: etcd://host:port,...
func (c *EtcdCluster) Servers() string {
	var s []string
	for _, m := range c.Members {
		_, hostport, _ := strings.Cut(m.ClientURL, "://")
		s = append(s, "etcd://"+hostport)
	}
	return strings.Join(s, ",")
}

// Kill kills member i with SIGKILL and waits until it is reaped.
func (c *EtcdCluster) Kill(i int) { c.Members[i].Proc.Kill() }

// Restart starts member i again on its data dir, after Kill.
func (c *EtcdCluster) Restart(i int) {
	c.t.Helper()
	c.start(i, "existing")
}

// Healthy reports whether member i answers its health check: it runs
// and its cluster has a leader it can reach.
func (c *EtcdCluster) Healthy(i int) bool {
	m := c.Members[i]
	if !m.Proc.Running() {
		return false
	}
	hc := http.Client{Timeout: time.Second}
	if c.clientTLS != nil {
		hc.Transport = &http.Transport{TLSClientConfig: c.clientTLS}
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(m.ClientURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitHealthy waits up to d until every running member is healthy; a
// member that exited fails the test at once.
func (c *EtcdCluster) WaitHealthy(d time.Duration) {
	c.t.Helper()
	WaitFor(c.t, d, "etcd members healthy", func() bool {
		for i, m := range c.Members {
			if !m.Proc.Running() {
				continue
			}
			if !c.Healthy(i) {
				return false
			}
		}
		return true
	})
}

// Etcdctl runs etcdctl (v3 API) against the cluster and returns its
// combined output; a failure fails the test.
func (c *EtcdCluster) Etcdctl(args ...string) string {
	c.t.Helper()
	out, err := c.EtcdctlErr(args...)
	if err != nil {
		c.t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// EtcdctlErr is Etcdctl that returns the error instead.
func (c *EtcdCluster) EtcdctlErr(args ...string) (string, error) {
	bin := os.Getenv("COORDRUN_ETCDCTL")
	if bin == "" {
		bin = EtcdctlBin
	}
	global := []string{"--endpoints", strings.Join(c.Endpoints(), ","), "--dial-timeout", "5s"}
	if c.CA != nil {
		global = append(global, "--cacert", c.CA.File, "--cert", c.ClientCert, "--key", c.ClientKey)
	}
	cmd := exec.Command(bin, append(global, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "ETCDCTL_API=3"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
