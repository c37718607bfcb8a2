// Package statuspage is the member's live status page and its JSON API,
// served on the admin listener: the ensemble (every member's role, term,
// indexes, lag, reachability, uptime; charts of the serving member's
// sessions, znodes, watches, request rate and p99 latency over the last
// minutes), the supervisor's locks (holder, queue, recent holders), its
// cron jobs (schedule, next firing, hosts, recent firings) and a read-only
// znode browser.
//
// Everything is read through a Source, which the member implements; the
// page imports neither the member nor the supervisor and decodes the
// supervisor's records with its own read-only structs. Znodes are read as
// a client without credentials, so a node whose ACL grants world:anyone
// no read is shown as unreadable.
//
// The page is server-rendered (html/template), so it reads without
// JavaScript; with it, a small script embedded in the binary keeps it
// current from a stream of Server-Sent Events (/api/events) and browses
// the tree through the JSON API. One broadcaster builds the state once a
// second while someone listens, encodes it once and hands the same bytes
// to every stream when it changed (the charts' last point moves every
// second): a viewer costs the member a write, not a read of the tree.
//
// The page and the API are served only to loopback clients and to those
// the member's Allowed function accepts (--admin-allow), as is the rest
// of the admin listener.
package statuspage

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

//go:embed assets
var assets embed.FS

// Options configure a Server. Zero values take the defaults below.
type Options struct {
	// LockRoot and CronRoot are the znode folders of the supervisor's
	// locks and cron jobs: default "/coordrun/locks" and
	// "/coordrun/cron", as `coordrun run` and `coordrun cron` have them.
	LockRoot string
	CronRoot string
	// Allowed decides whether a client at remote (host:port) may see
	// the page. Nil: loopback clients only.
	Allowed func(remote string) bool
	// Interval is how often the state is built for the streams (default
	// 1s); SampleEvery how often the charts get a point (default 5s),
	// of which Samples are kept (default 120: ten minutes).
	Interval    time.Duration
	SampleEvery time.Duration
	Samples     int
	// MaxStreams bounds the event streams open at once (default 64),
	// MaxStreamsPerAddr those of one client address (default 8), so
	// that one client cannot take them all. A refused stream gets 503,
	// and Refused (if set) hears why: RefusedStreamsTotal or
	// RefusedStreamsPerAddr.
	MaxStreams        int
	MaxStreamsPerAddr int
	Refused           func(reason string)
	Now               func() time.Time
	Log               *slog.Logger
}

// Defaults of Options: the folders coordrun run and coordrun cron use
// unless told otherwise (supervisor/state is their one home).
const (
	DefaultLockRoot = state.DefaultLockRoot
	DefaultCronRoot = state.DefaultCronRoot
)

// Server serves the page and the API over a Source. Run keeps its charts
// and streams going; its handlers may be used concurrently.
type Server struct {
	src  Source
	o    Options
	page *template.Template

	samples *samples
	holders *holderLog
	names   *folderCache // of the folders the views list

	mu      sync.Mutex                 // guards streams, perAddr and last
	streams map[chan []byte]netip.Addr // open streams, with their client's address
	perAddr map[netip.Addr]int         // open streams by client address
	last    []byte                     // the state last broadcast, without its server_time
	done    chan struct{}              // closed when Run returns
}

// New makes a Server over src.
func New(src Source, o Options) *Server {
	if o.LockRoot == "" {
		o.LockRoot = DefaultLockRoot
	}
	if o.CronRoot == "" {
		o.CronRoot = DefaultCronRoot
	}
	if o.Allowed == nil {
		o.Allowed = loopbackOnly
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Samples <= 0 {
		o.Samples = 120
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 64
	}
	if o.MaxStreamsPerAddr <= 0 {
		o.MaxStreamsPerAddr = 8
	}
	if o.Refused == nil {
		o.Refused = func(string) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		src: src, o: o, page: parsePage(),
		samples: newSamples(o.Samples), holders: newHolderLog(),
		names:   newFolderCache(),
		streams: map[chan []byte]netip.Addr{}, perAddr: map[netip.Addr]int{}, done: make(chan struct{}),
	}
}

func loopbackOnly(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// Run samples the charts and feeds the event streams until ctx ends;
// then the streams end too.
func (s *Server) Run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	s.samples.add(s.o.Now(), s.src.Counters())
	lastSample := s.o.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.o.Now()
		sampled := now.Sub(lastSample) >= s.o.SampleEvery-s.o.Interval/2
		if sampled {
			s.samples.add(now, s.src.Counters())
			lastSample = now
		}
		switch {
		case s.Streams() > 0:
			s.broadcast(ctx)
		case sampled:
			// Nobody watches: still follow the holders, for the
			// history of the next one who looks.
			s.locks()
		}
	}
}

// folders reads folder names through the cache, now.
func (s *Server) folders() folders { return folders{c: s.names, now: s.o.Now()} }

// State is everything the page shows but a lock's detail and the tree:
// what /api/state answers and every event of /api/events carries.
type State struct {
	ServerTime time.Time    `json:"server_time,omitzero"`
	Member     string       `json:"member"`
	Ensemble   EnsembleView `json:"ensemble"`
	Charts     []Sample     `json:"charts"`
	Locks      LocksView    `json:"locks"`
	Cron       CronView     `json:"cron"`
	// Warning is a standing warning about the member's setup, shown as a
	// banner (a Source that is a Warner gives it).
	Warning string `json:"warning,omitempty"`
}

// Warner is a Source that may have a standing warning for the page.
type Warner interface{ Warning() string }

// ensembleWait bounds how long a state waits for the other members'
// reports; one that has not answered by then is shown unreachable.
const ensembleWait = 800 * time.Millisecond

func (s *Server) ensemble(ctx context.Context) EnsembleView {
	ctx, cancel := context.WithTimeout(ctx, ensembleWait)
	defer cancel()
	return ensembleView(s.src.ID(), s.src.Ensemble(ctx))
}

// state builds the State; its ServerTime is left zero.
func (s *Server) state(ctx context.Context) State {
	st := State{Member: s.src.ID(), Ensemble: s.ensemble(ctx), Charts: s.samples.all(s.o.Now(), s.src.Counters())}
	if w, ok := s.src.(Warner); ok {
		st.Warning = w.Warning()
	}
	var locks []lockRaw
	var jobs []jobRaw
	var lerr, cerr error
	s.src.ReadTree(func(t Tree) {
		locks, lerr = readLocks(t, s.folders(), s.o.LockRoot, "")
		jobs, cerr = readCron(t, s.folders(), s.o.CronRoot)
	})
	st.Locks = s.lockViews(locks, lerr)
	st.Cron = s.cronView(jobs, cerr)
	return st
}

// locks reads every lock (and notes their holders).
func (s *Server) locks() LocksView {
	var locks []lockRaw
	var err error
	s.src.ReadTree(func(t Tree) { locks, err = readLocks(t, s.folders(), s.o.LockRoot, "") })
	return s.lockViews(locks, err)
}

func (s *Server) lockViews(raw []lockRaw, err error) LocksView {
	v := LocksView{Root: s.o.LockRoot, Locks: make([]LockView, 0, len(raw))}
	for _, r := range raw {
		v.Locks = append(v.Locks, lockView(r, s.src.Session))
	}
	switch {
	case errors.Is(err, ErrNoNode):
		// No lock was ever taken: nothing to show, nothing wrong.
	case err != nil:
		v.Error = nodeError(err)
	}
	if err == nil || !errors.Is(err, ErrNoAuth) {
		s.holders.observe(s.o.Now(), v.Locks)
	}
	return v
}

func (s *Server) cron() CronView {
	var jobs []jobRaw
	var err error
	s.src.ReadTree(func(t Tree) { jobs, err = readCron(t, s.folders(), s.o.CronRoot) })
	return s.cronView(jobs, err)
}

func (s *Server) cronView(raw []jobRaw, err error) CronView {
	v := CronView{Root: s.o.CronRoot, Jobs: make([]CronJob, 0, len(raw))}
	now := s.o.Now()
	for _, r := range raw {
		v.Jobs = append(v.Jobs, cronJob(r, now))
	}
	if err != nil && !errors.Is(err, ErrNoNode) {
		v.Error = nodeError(err)
	}
	return v
}

// lock reads one lock with its history; ok is false when there is none.
func (s *Server) lock(name string) (LockView, bool) {
	var raw []lockRaw
	var err error
	s.src.ReadTree(func(t Tree) { raw, err = readLocks(t, folders{}, s.o.LockRoot, name) })
	if errors.Is(err, ErrNoNode) || len(raw) == 0 {
		return LockView{}, false
	}
	v := lockView(raw[0], s.src.Session)
	if v.Error == "" {
		s.holders.mu.Lock()
		s.holders.note(s.o.Now(), v)
		s.holders.mu.Unlock()
	}
	v.History = s.holders.history(v)
	return v, true
}

func (s *Server) node(p string) NodeView {
	var v NodeView
	s.src.ReadTree(func(t Tree) { v = readNode(t, p) })
	v.render()
	return v
}

// --- HTTP --------------------------------------------------------------------

// Handler serves the page at / and the API under /api/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", assetServer(static)))
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.HandleFunc("GET /api/state", s.apiState)
	mux.HandleFunc("GET /api/ensemble", s.apiEnsemble)
	mux.HandleFunc("GET /api/locks", s.apiLocks)
	mux.HandleFunc("GET /api/locks/{name}", s.apiLock)
	mux.HandleFunc("GET /api/cron", s.apiCron)
	mux.HandleFunc("GET /api/cron/{job}", s.apiJob)
	mux.HandleFunc("GET /api/tree", s.apiTree)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			jsonError(w, http.StatusMethodNotAllowed, "the API is read-only: GET only")
			return
		}
		jsonError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return s.guard(mux)
}

// guard refuses clients Options.Allowed does not accept, sets the
// headers every answer carries, and turns a panic into a 500.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		if !s.o.Allowed(r.RemoteAddr) {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("forbidden: the status page is served to loopback clients and to the networks of --admin-allow only\n"))
			return
		}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.o.Log.Error("status page handler panicked", "path", r.URL.Path, "panic", v)
				jsonError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// served are the embedded files served under /assets/, by name; the
// page's template is not one of them.
var served = map[string]string{"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}

// assetServer serves the embedded files; they change only with the
// binary, so browsers may keep them for a while.
func assetServer(static fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctype, ok := served[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, err := fs.ReadFile(static, r.URL.Path)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "public, max-age=300")
		http.ServeContent(w, r, r.URL.Path, assetTime, bytes.NewReader(b))
	})
}

// assetTime is the assets' modification time: the process's start, as
// they come with the binary.
var assetTime = time.Now()

// only checks that the request has no parameters but those allowed.
func only(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	q, err := parseQuery(r)
	if err != nil {
		badRequest(w, err.Error())
		return false
	}
	for k, vs := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			badRequest(w, "unknown parameter "+quote(k))
			return false
		}
		if len(vs) > 1 {
			badRequest(w, "parameter "+quote(k)+" given more than once")
			return false
		}
	}
	return true
}

func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errors.New("malformed query: " + err.Error())
	}
	return q, nil
}

func (s *Server) apiState(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	st := s.state(r.Context())
	st.ServerTime = s.o.Now().UTC().Truncate(time.Millisecond)
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) apiEnsemble(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		EnsembleView
		Charts []Sample `json:"charts"`
	}{s.ensemble(r.Context()), s.samples.all(s.o.Now(), s.src.Counters())})
}

func (s *Server) apiLocks(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, s.locks())
}

func (s *Server) apiLock(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	name := r.PathValue("name")
	if err := checkName(name); err != nil {
		badRequest(w, err.Error())
		return
	}
	v, ok := s.lock(name)
	if !ok {
		jsonError(w, http.StatusNotFound, "no lock "+quote(name)+" under "+s.o.LockRoot)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) apiCron(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, s.cron())
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request) {
	if !only(w, r) {
		return
	}
	name := r.PathValue("job")
	if err := checkName(name); err != nil {
		badRequest(w, err.Error())
		return
	}
	var raw jobRaw
	var err error
	s.src.ReadTree(func(t Tree) {
		if _, err = t.Exists(path.Join(s.o.CronRoot, name)); err == nil {
			raw = readJob(t, folders{}, s.o.CronRoot, name)
		}
	})
	if err != nil {
		jsonError(w, http.StatusNotFound, "no cron job "+quote(name)+" under "+s.o.CronRoot)
		return
	}
	writeJSON(w, http.StatusOK, cronJob(raw, s.o.Now()))
}

func (s *Server) apiTree(w http.ResponseWriter, r *http.Request) {
	if !only(w, r, "path") {
		return
	}
	q, _ := parseQuery(r)
	p := "/"
	if vs, ok := q["path"]; ok {
		p = vs[0]
	}
	if err := checkPath(p); err != nil {
		badRequest(w, err.Error())
		return
	}
	v := s.node(p)
	if v.Error != "" {
		writeJSON(w, http.StatusNotFound, v)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// jsonError answers {"error": msg}.
func jsonError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{msg})
}

func badRequest(w http.ResponseWriter, msg string) { jsonError(w, http.StatusBadRequest, msg) }

func quote(s string) string { return strconv.Quote(s) }
