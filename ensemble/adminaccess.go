package ensemble

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// adminAccess is who the admin listener answers, one rule for everything
// it serves (/metrics, /healthz, /readyz, pprof, the status page and its
// API): clients on the member's host (loopback) and in Config.AdminAllow,
// and only requests that name the listener by an IP address, localhost,
// or a name of Config.AdminHosts or Config.AdminAddr.
//
// The address rule keeps the member's figures, its argv (pprof's cmdline)
// and the supervisor's records from anyone who can reach the port. The
// Host rule stops DNS rebinding: a page at attacker.example whose name
// has been made to resolve to 127.0.0.1 reaches the listener from a
// browser on the member's host (or through an operator's SSH tunnel)
// with a loopback address, but its requests carry Host attacker.example.
// The Origin rule refuses what a browser sends for another site's page
// that asks the listener directly. The fetch-metadata rule (siteAllowed)
// refuses what a browser marks as sent for another site's page even where
// Origin is absent (an img or script tag) or names an IP address, which
// the Host rule has to accept.
type adminAccess struct {
	allow []netip.Prefix
	hosts map[string]bool // lower case, without a trailing dot
}

// newAdminAccess builds the rule of a checked configuration.
func newAdminAccess(cfg *Config) adminAccess {
	a := adminAccess{allow: cfg.AdminAllow, hosts: map[string]bool{}}
	for _, h := range cfg.AdminHosts {
		a.hosts[hostKey(h)] = true
	}
	if h, _, err := net.SplitHostPort(cfg.AdminAddr); err == nil && h != "" {
		a.hosts[hostKey(h)] = true
	}
	return a
}

func hostKey(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// ParseAdminNetwork reads one --admin-allow entry: a network in CIDR
// notation, or one address.
func ParseAdminNetwork(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%q is neither a network (10.0.0.0/8) nor an address", s)
}

// checkAdminHost validates one --admin-host name.
func checkAdminHost(h string) error {
	if h == "" || len(h) > 253 || strings.ContainsAny(h, ":/[]@ \t") {
		return fmt.Errorf("--admin-host %q: not a host name (give the name alone, without a port or scheme)", h)
	}
	return nil
}

// addrAllowed reports whether a client at remote (host:port) may use the
// listener.
func (a adminAccess) addrAllowed(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	if addr.IsLoopback() {
		return true
	}
	for _, p := range a.allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// hostAllowed reports whether a request's Host (host or host:port) names
// this listener. An IP address cannot be rebound, and a browser resolves
// localhost itself.
func (a adminAccess) hostAllowed(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = hostKey(h)
	return h == "localhost" || a.hosts[h]
}

// originAllowed reports whether a request's Origin, when it has one, is
// a page of this listener's: any host the Host rule accepts.
func (a adminAccess) originAllowed(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" among them: a sandboxed or local-file page
	}
	return a.hostAllowed(u.Host)
}

// siteAllowed is the fetch-metadata rule. A browser says in
// Sec-Fetch-Site whose page a request is for; "cross-site" is a page of
// another site, which has no business with the listener's figures, its
// event stream (one of a capped number per address) or pprof's profiles
// (seconds of CPU each), whether it asks with fetch, EventSource or a tag.
// Following a link to the listener from another site (a top-level GET
// navigation) stays allowed: the user asked for that page, and no script
// of the other site sees the answer. A request without the header is not
// from a browser that sends it (curl, Prometheus, an older browser) and
// is left to the other rules.
func siteAllowed(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") != "cross-site" {
		return true
	}
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document"
}

// Why the admin listener refused a request, as coordrun_admin_http_refused_total
// counts it (with statuspage's stream refusals).
const (
	refusedAddress = "address"
	refusedHost    = "host"
	refusedOrigin  = "origin"
	refusedSite    = "cross_site"
)

// guard serves next to the requests the rule accepts; others get 403
// (address, Origin, cross-site) or 421 (Host) with a line naming the flag that
// would let them in, and refused hears why.
func (a adminAccess) guard(next http.Handler, refused func(reason string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		var reason, msg string
		switch {
		case !a.addrAllowed(r.RemoteAddr):
			code, reason = http.StatusForbidden, refusedAddress
			msg = fmt.Sprintf("forbidden: the admin listener answers clients on this host (loopback) and in the networks of --admin-allow only; not %s",
				r.RemoteAddr)
		case r.Host != "" && !a.hostAllowed(r.Host):
			code, reason = http.StatusMisdirectedRequest, refusedHost
			msg = fmt.Sprintf("misdirected request: Host %q does not name this admin listener; it answers to IP addresses, localhost "+
				"and the names of --admin-host (and of --admin-addr)", r.Host)
		case !a.originAllowed(r.Header.Get("Origin")):
			code, reason = http.StatusForbidden, refusedOrigin
			msg = fmt.Sprintf("forbidden: a request from another site's page (Origin %q); the admin listener answers pages at IP addresses, "+
				"localhost and the names of --admin-host (and of --admin-addr)", r.Header.Get("Origin"))
		case !siteAllowed(r):
			code, reason = http.StatusForbidden, refusedSite
			msg = fmt.Sprintf("forbidden: the browser says this request is for another site's page (Sec-Fetch-Site: cross-site, "+
				"Sec-Fetch-Mode: %q); from another site the admin listener answers only a link followed to it. "+
				"Open the page from its own address, or query it without a browser (curl)", r.Header.Get("Sec-Fetch-Mode"))
		default:
			next.ServeHTTP(w, r)
			return
		}
		refused(reason)
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		_, _ = fmt.Fprintln(w, msg)
	})
}
