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

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminServer is the member's HTTP listener for operators: Prometheus
// metrics and health probes. It is off unless Config.AdminAddr is set. It
// serves nothing that changes the member or reveals znode data. With
// Config.Pprof it also serves Go's profiles under /debug/pprof/ (stacks and
// timings, no znode data), off by default since a CPU profile costs CPU.
type adminServer struct {
	srv *http.Server
	ln  net.Listener
}

// startAdmin opens the admin listener if one is configured; the server
// goroutine belongs to m.wg and ends in Close.
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
	a := &adminServer{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		},
	}
	m.admin = a
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error("admin listener", "err", err)
		}
	}()
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

// AdminAddr is the address the admin HTTP listener is bound to, or "" when
// it is off.
func (m *Member) AdminAddr() string {
	if m.admin == nil {
		return ""
	}
	return m.admin.ln.Addr().String()
}

// Metrics is the member's own Prometheus registry, for embedding programs
// that serve metrics themselves instead of through Config.AdminAddr.
func (m *Member) Metrics() prometheus.Gatherer { return m.metrics.reg }

// Ready reports why the member should not be sent clients yet, or nil: it
// must know a leader and be a leader or follower itself (not a candidate,
// not shut down). A member cut off from a quorum loses its leader within
// an election timeout and turns not ready.
func (m *Member) Ready() error {
	if m.ctx.Err() != nil {
		return ErrClosed
	}
	switch st := m.raft.State(); st {
	case raft.Leader, raft.Follower:
	default:
		return fmt.Errorf("raft state is %s", strings.ToLower(st.String()))
	}
	if addr, _ := m.raft.LeaderWithID(); addr == "" {
		return errors.New("no leader known")
	}
	return nil
}

// Live is a cheap check that the member still does its basic work, for
// the systemd watchdog and /healthz: the client port accepts and answers
// ruok, and the state machine is not wedged (its lock can be taken before
// ctx ends). It says nothing about quorum; see Ready.
//
// With TLS on the client port the member cannot ask itself ruok (it may
// need a client certificate it does not have); then only its accept loop
// is checked.
func (m *Member) Live(ctx context.Context) error {
	if m.ctx.Err() != nil {
		return ErrClosed
	}
	if m.acceptEnded.Load() {
		return errors.New("client port: accept loop ended")
	}
	if m.cfg.ClientTLS == nil {
		if err := m.ruok(ctx); err != nil {
			return fmt.Errorf("client port: %w", err)
		}
	}
	// A wedged Apply holds the write lock forever; then this goroutine
	// stays blocked too, which is harmless next to a wedged member.
	locked := make(chan struct{})
	go func() {
		m.fsm.mu.RLock()
		m.fsm.mu.RUnlock()
		close(locked)
	}()
	select {
	case <-locked:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("state machine busy: %w", ctx.Err())
	}
}

// ruok asks this member's own client port, the way a client reaches it.
func (m *Member) ruok(ctx context.Context) error {
	addr := m.client.Addr().String()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("localhost", port)
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
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
