package statuspage_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/coordrun/coordrun/internal/testkit/ensembletest"
)

// The page on an in-process member: the member's ACLs and its admin
// access rule, for real.

// TestMemberTreeHonoursACLs: a node whose ACL grants world:anyone nothing
// is shown as unreadable, with neither data nor children, in the API and
// on the page; its readable sibling is shown.
func TestMemberTreeHonoursACLs(t *testing.T) {
	cl := ensembletest.Start(t, 1, func(c *ensemble.Config) { c.AdminAddr = "127.0.0.1:0" })
	m := cl.Member(0)
	ctx := testkit.Context(t, 30*time.Second)
	c, err := client.Connect(ctx, client.Config{Servers: []string{m.ClientAddr()}, Auth: []client.Auth{{Scheme: "digest", Secret: []byte("ops:pw")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	private := []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: zk.DigestID("ops:pw")}}}
	if _, err := c.Create(ctx, "/vault", []byte("the combination is 1234"), 0, private); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, "/vault/inner", nil, 0, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, "/open", []byte(`{"ok":true}`), 0, client.OpenACL); err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.AdminAddr()

	v := getMember[statuspage.NodeView](t, base+"/api/tree?path=/vault", http.StatusOK)
	if v.Data != nil || v.Text != "" || len(v.Children) != 0 || !strings.Contains(v.DataError, "not readable") || !strings.Contains(v.ACLError, "not readable") {
		t.Errorf("/vault through the page: %+v", v)
	}
	if v.Stat == nil || v.Stat.DataLength != 23 {
		t.Errorf("/vault's stat (which exists shows anyone): %+v", v.Stat)
	}
	if o := getMember[statuspage.NodeView](t, base+"/api/tree?path=/open", http.StatusOK); o.JSON == "" || o.DataError != "" || len(o.ACL) != 1 {
		t.Errorf("/open: %+v", o)
	}
	resp, err := http.Get(base + "/?path=/vault")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(page), "combination") || !strings.Contains(string(page), "not readable") {
		t.Errorf("page of /vault: %d, secret shown or no notice", resp.StatusCode)
	}
	// The metrics and probes are where they were.
	if resp, err := http.Get(base + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/metrics: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func getMember[T any](t *testing.T, url string, code int) T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v T
	if resp.StatusCode != code {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, code)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}

// TestMemberRefusesRemoteClients: from an address of this host that is
// not loopback, everything the admin listener serves (the page, its API
// and assets, /metrics, /healthz, /readyz and pprof) answers 403 naming
// --admin-allow, unless AdminAllow holds the address.
func TestMemberRefusesRemoteClients(t *testing.T) {
	ip := externalIP(t)
	for _, allowed := range []bool{false, true} {
		cl := ensembletest.Start(t, 1, func(c *ensemble.Config) {
			c.AdminAddr = net.JoinHostPort(ip.String(), "0")
			c.Pprof = true
			if allowed {
				c.AdminAllow = []netip.Prefix{netip.PrefixFrom(ip, ip.BitLen())}
			}
		})
		checkRemote(t, cl.Member(0).AdminAddr(), ip, allowed)
	}
}

// checkRemote asks every path of the admin listener at addr from ip.
func checkRemote(t *testing.T, addr string, ip netip.Addr, allowed bool) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}}).DialContext}}
	for _, p := range []string{"/", "/api/state", "/api/tree?path=/", "/assets/app.js", "/metrics", "/healthz", "/readyz",
		"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2"} {
		resp, err := hc.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case !allowed && (resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "--admin-allow")):
			t.Errorf("GET %s from %s, not allowed: %d %.80q, want 403 naming --admin-allow", p, ip, resp.StatusCode, body)
		case allowed && resp.StatusCode != http.StatusOK:
			t.Errorf("GET %s from %s, allowed by AdminAllow: %d", p, ip, resp.StatusCode)
		}
	}
}

// externalIP is an IPv4 address of this host other than loopback; the
// test is skipped on a host without one.
func externalIP(t *testing.T) netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host to reach the admin listener from")
	return netip.Addr{}
}

// TestMemberCloseEndsStreams: an open page does not hold up the member's
// Close, and its stream ends with it.
func TestMemberCloseEndsStreams(t *testing.T) {
	cl := ensembletest.Start(t, 1, func(c *ensemble.Config) { c.AdminAddr = "127.0.0.1:0" })
	resp, err := http.Get("http://" + cl.Member(0).AdminAddr() + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, first, len(first)); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	stopped := make(chan struct{})
	go func() { cl.Stop(0); close(stopped) }()
	testkit.Recv(t, stopped, 20*time.Second, "the member's Close with a stream open")
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	testkit.Recv(t, ended, 5*time.Second, "the stream's end")
}
