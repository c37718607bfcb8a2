package ensemble

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestAdminAccessRule(t *testing.T) {
	a := newAdminAccess(&Config{
		AdminAddr:  "mgmt-1.example:8080",
		AdminAllow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("2001:db8::/32")},
		AdminHosts: []string{"Coord-1.Internal."},
	})
	for remote, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.9.9.9:1": true, "[::1]:5000": true, "[::ffff:127.0.0.1]:1": true,
		"10.1.2.3:5000": true, "[::ffff:10.1.2.3]:1": true, "[2001:db8::5]:1": true,
		"10.2.0.1:5000": false, "192.0.2.2:5000": false, "[2001:db9::5]:1": false, "": false, "@": false, "10.1.2.3": false,
	} {
		if got := a.addrAllowed(remote); got != want {
			t.Errorf("addrAllowed(%q) = %v", remote, got)
		}
	}
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.1": true, "[::1]:8080": true, "[::1]": true, "10.9.9.9:80": true,
		"localhost:8080": true, "LOCALHOST.": true, "coord-1.internal:8080": true, "COORD-1.INTERNAL.": true,
		"mgmt-1.example:8080": true, "mgmt-1.example": true,
		"attacker.example:8080": false, "attacker.example": false, "localhost.attacker.example": false,
		"127.0.0.1.nip.io:8080": false, "coord-1.internal.attacker.example": false, "[attacker]:80": false,
	} {
		if got := a.hostAllowed(host); got != want {
			t.Errorf("hostAllowed(%q) = %v", host, got)
		}
	}
	for origin, want := range map[string]bool{
		"": true, "http://127.0.0.1:8080": true, "https://localhost:9090": true, "http://coord-1.internal": true,
		"http://attacker.example": false, "http://attacker.example:8080": false, "null": false, "file://": false,
		"ftp://127.0.0.1": false, "http://": false,
	} {
		if got := a.originAllowed(origin); got != want {
			t.Errorf("originAllowed(%q) = %v", origin, got)
		}
	}
}

func TestParseAdminNetwork(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.0/8": "10.0.0.0/8", "10.1.2.3/8": "10.0.0.0/8", "192.0.2.7": "192.0.2.7/32", "::1": "::1/128"} {
		if p, err := ParseAdminNetwork(in); err != nil || p.String() != want {
			t.Errorf("ParseAdminNetwork(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "any", "10.0.0.0/33", "example.com", "fe80::1%eth0"} {
		if _, err := ParseAdminNetwork(in); err == nil {
			t.Errorf("ParseAdminNetwork(%q) accepted", in)
		}
	}
	cfg := Config{ID: "1", DataDir: "/nonexistent", PeerAddr: "127.0.0.1:1", AdminAddr: "127.0.0.1:0", AdminHosts: []string{"host:8080"}}
	if err := cfg.setDefaults(); err == nil || !strings.Contains(err.Error(), "--admin-host") {
		t.Errorf("AdminHosts with a port: %v", err)
	}
	cfg = Config{ID: "1", DataDir: "/nonexistent", PeerAddr: "127.0.0.1:1", AdminAllow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if err := cfg.setDefaults(); err == nil || !strings.Contains(err.Error(), "--admin-addr") {
		t.Errorf("AdminAllow without AdminAddr: %v", err)
	}
}

// The guard on a handler, with the client's address as the HTTP server
// would set it.
func TestAdminGuard(t *testing.T) {
	var refused []string
	h := newAdminAccess(&Config{AdminAddr: "127.0.0.1:8080"}).guard(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }),
		func(r string) { refused = append(refused, r) })
	for _, c := range []struct {
		remote, host, origin string
		code                 int
		says                 string
	}{
		{"127.0.0.1:40000", "127.0.0.1:8080", "", 200, "served"},
		{"127.0.0.1:40000", "localhost:8080", "http://localhost:8080", 200, "served"},
		{"192.0.2.2:40000", "127.0.0.1:8080", "", 403, "--admin-allow"},
		{"127.0.0.1:40000", "attacker.example:8080", "", 421, "--admin-host"},
		{"127.0.0.1:40000", "127.0.0.1:8080", "http://attacker.example", 403, "--admin-host"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.RemoteAddr, r.Host = c.remote, c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("from %s, Host %s, Origin %q: %d %q; want %d and %q", c.remote, c.host, c.origin, w.Code, w.Body.String(), c.code, c.says)
		}
	}
	if strings.Join(refused, ",") != "address,host,origin" {
		t.Errorf("refusals counted: %v", refused)
	}
}

// adminRequest makes one request to m's admin listener with the given
// Host and Origin (none when empty).
func adminRequest(t *testing.T, m *Member, path, host, origin string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+m.AdminAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminHostHeader: a request over loopback whose Host is a foreign
// name (DNS rebinding), or that comes from a foreign page (Origin), is
// refused on every path of the listener; a name given in AdminHosts is
// accepted; the refusals are counted.
func TestAdminHostHeader(t *testing.T) {
	c := startCluster(t, 1, withAdmin, func(cfg *Config) { cfg.Pprof = true; cfg.AdminHosts = []string{"coord-1.internal"} })
	m := c.Member(0)
	_, port, _ := net.SplitHostPort(m.AdminAddr())
	paths := []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/cmdline", "/", "/api/state", "/assets/app.js"}
	for _, p := range paths {
		if code, body := adminRequest(t, m, p, "attacker.example:"+port, ""); code != http.StatusMisdirectedRequest || !strings.Contains(body, "--admin-host") {
			t.Errorf("GET %s with Host attacker.example: %d %.100q, want 421 naming --admin-host", p, code, body)
		}
		if code, body := adminRequest(t, m, p, "", "http://attacker.example:"+port); code != http.StatusForbidden || !strings.Contains(body, "--admin-host") {
			t.Errorf("GET %s with a foreign Origin: %d %.100q, want 403 naming --admin-host", p, code, body)
		}
		for _, host := range []string{"", "localhost:" + port, "coord-1.internal:" + port} {
			if code, body := adminRequest(t, m, p, host, ""); code != http.StatusOK {
				t.Errorf("GET %s with Host %q: %d %.100q", p, host, code, body)
			}
		}
	}
	s := scrapeMetrics(t, m)
	for _, reason := range []string{"host", "origin"} {
		if v, _ := s.value("coordrun_admin_http_refused_total", "reason", reason); v != float64(len(paths)) {
			t.Errorf("coordrun_admin_http_refused_total{reason=%q} = %v, want %d", reason, v, len(paths))
		}
	}
	if _, ok := s.value("coordrun_admin_event_streams"); !ok {
		t.Error("no coordrun_admin_event_streams")
	}
}

// TestAdminCrossSite: what a browser marks as sent for another site's page
// is refused (its fetches and event streams, its img and script tags),
// also when its Origin names an IP address, which the Origin rule must
// accept; a link followed from another site, a same-origin request and a
// request without fetch metadata (curl) are served.
func TestAdminCrossSite(t *testing.T) {
	var refused []string
	h := newAdminAccess(&Config{AdminAddr: "127.0.0.1:8080"}).guard(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }),
		func(r string) { refused = append(refused, r) })
	for _, c := range []struct {
		method, path, site, mode, dest, origin string
		code                                   int
	}{
		{"GET", "/api/events", "cross-site", "cors", "empty", "http://203.0.113.5", 403}, // EventSource from a page at an IP
		{"GET", "/api/state", "cross-site", "cors", "empty", "http://203.0.113.5", 403},
		{"GET", "/debug/pprof/profile", "cross-site", "no-cors", "image", "", 403}, // <img src=...>, no Origin sent
		{"POST", "/api/state", "cross-site", "navigate", "document", "", 403},      // a form posted from another site
		{"GET", "/", "cross-site", "navigate", "iframe", "", 403},                  // framed by another site
		{"GET", "/", "cross-site", "navigate", "document", "", 200},                // a link followed from another site
		{"GET", "/api/events", "same-origin", "cors", "empty", "http://127.0.0.1:8080", 200},
		{"GET", "/api/events", "none", "navigate", "document", "", 200}, // typed into the address bar
		{"GET", "/api/events", "", "", "", "", 200},                     // curl
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.RemoteAddr, r.Host = "127.0.0.1:40000", "127.0.0.1:8080"
		for k, v := range map[string]string{"Sec-Fetch-Site": c.site, "Sec-Fetch-Mode": c.mode, "Sec-Fetch-Dest": c.dest, "Origin": c.origin} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || (c.code == 403 && !strings.Contains(w.Body.String(), "Sec-Fetch-Site")) {
			t.Errorf("%s %s site %q mode %q dest %q: %d %q, want %d", c.method, c.path, c.site, c.mode, c.dest, w.Code, w.Body.String(), c.code)
		}
	}
	if strings.Join(refused, ",") != "cross_site,cross_site,cross_site,cross_site,cross_site" {
		t.Errorf("refusals counted: %v", refused)
	}
}

// TestAdminCrossSiteMember: on a running member, another site's event
// stream is refused before it takes a stream, and counted.
func TestAdminCrossSiteMember(t *testing.T) {
	c := startCluster(t, 1, withAdmin)
	m := c.Member(0)
	req, err := http.NewRequest(http.MethodGet, "http://"+m.AdminAddr()+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "cors")
	req.Header.Set("Origin", "http://203.0.113.5")
	resp, err := adminHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "Sec-Fetch-Site") {
		t.Fatalf("a cross-site event stream: %d %q", resp.StatusCode, b)
	}
	if v, _ := scrapeMetrics(t, m).value("coordrun_admin_http_refused_total", "reason", "cross_site"); v != 1 {
		t.Errorf("coordrun_admin_http_refused_total{reason=\"cross_site\"} = %v, want 1", v)
	}
}
