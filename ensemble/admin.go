package ensemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminServer is the member's HTTP listener for operators: Prometheus
// metrics and health probes, and the status page with its JSON API
// (statuspage) at / and /api/. It is off unless Config.AdminAddr is set.
// It serves nothing that changes the member, and all of it only to the
// clients and Host names adminAccess accepts (loopback, AdminAllow,
// AdminHosts). The status page shows znode data as a client without
// credentials may read it. With Config.Pprof it also serves Go's
// profiles under /debug/pprof/ (stacks, timings and the command line, no
// znode data), off by default since a CPU profile costs CPU.
type adminServer struct {
	srv *http.Server
	ln  net.Listener
}

// startAdmin opens the admin listener if one is configured; the server
// goroutine ends in Close.
func (m *Member) startAdmin() error {
	if m.cfg.AdminAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", m.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		probeReply(w, m.Live(ctx))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		probeReply(w, m.Ready())
	})
	if m.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	access := newAdminAccess(&m.cfg)
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordrun_admin_http_refused_total",
		Help: "Requests the admin listener refused, by reason: address (not loopback or --admin-allow), host (Host not an IP, localhost " +
			"or --admin-host), origin (another site's page), streams_per_address and streams_total (event streams over their cap).",
	}, []string{"reason"})
	for _, r := range []string{refusedAddress, refusedHost, refusedOrigin, refusedSite, statuspage.RefusedStreamsPerAddr, statuspage.RefusedStreamsTotal} {
		refused.WithLabelValues(r)
	}
	count := func(reason string) { refused.WithLabelValues(reason).Inc() }
	page := statuspage.New(pageSource{m}, statuspage.Options{
		LockRoot: m.cfg.StatusLockRoot,
		CronRoot: m.cfg.StatusCronRoot,
		Allowed:  access.addrAllowed,
		Refused:  count,
		Log:      m.log,
	})
	m.metrics.reg.MustRegister(refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "coordrun_admin_event_streams",
		Help: "Event streams open on the status page (at most 64, 8 per client address).",
	}, func() float64 { return float64(page.Streams()) }))
	mux.Handle("/", page.Handler())
	m.tr.Go(func() { page.Run(m.ctx) })
	a := &adminServer{
		ln: ln,
		srv: &http.Server{
			Handler:           access.guard(mux, count),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		},
	}
	m.admin = a
	m.tr.Go(func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("admin listener", "err", err)
		}
	})
	m.log.Info("admin listener", "addr", ln.Addr().String())
	return nil
}

// close stops the admin listener at once; a scrape in progress is cut off.
func (a *adminServer) close() {
	if a != nil {
		_ = a.srv.Close()
	}
}

// probeReply answers a health probe: 200 "ok", or 503 and the reason on
// one line.
func probeReply(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Fprintln(w, "ok")
}

// ruok asks this member's own client port, the way a client reaches it.
func (m *Member) ruok(ctx context.Context) error {
	d, done := m.probes.dialer()
	defer done()
	var nc net.Conn
	var err error
	for _, addr := range selfAddrs(m.client.Addr().String()) {
		if nc, err = d.DialContext(ctx, "tcp", addr); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	if _, err := nc.Write([]byte("ruok")); err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(nc, 16))
	if err != nil {
		return err
	}
	if string(b) != "imok" {
		return fmt.Errorf("ruok answered %q", b)
	}
	return nil
}

// selfAddrs are the addresses to reach a listener at addr from the same
// host. A wildcard listener is reached on the loopback address of its
// family, by number: the name localhost may not resolve (a container
// without /etc/hosts, a broken resolver), and a health check that fails
// for that reason gets a healthy member killed. A dual-stack wildcard
// ("[::]", what ":2181" listens on) takes IPv4 too, and ::1 may not exist
// where IPv6 is off, so 127.0.0.1 comes first.
func selfAddrs(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return []string{addr}
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil || !ip.IsUnspecified():
		return []string{addr}
	case ip.To4() != nil:
		return []string{net.JoinHostPort("127.0.0.1", port)}
	}
	return []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)}
}
