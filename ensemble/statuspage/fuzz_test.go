package statuspage

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzHandlers sends the handlers any path and query: every answer is a
// page, a redirect or a JSON error under /api/, never a 500 (the guard
// turns a panic into one).
func FuzzHandlers(f *testing.F) {
	for _, seed := range []struct{ path, query string }{
		{"/", ""}, {"/", "path=/app/config&lock=nightly"}, {"/", "path=%zz"}, {"/", "lock=../x"},
		{"/api/tree", "path=/app/blob"}, {"/api/tree", "path=/app/private"}, {"/api/tree", "path=//"},
		{"/api/tree", "path=/a\x00b"}, {"/api/tree", "path=/\u00e9t\u00e9"}, {"/api/tree", ";path=/"},
		{"/api/locks/nightly", ""}, {"/api/locks/stale", "x=1"}, {"/api/locks/a%2Fb", ""},
		{"/api/cron/report", ""}, {"/api/cron/", ""}, {"/api/state", ""}, {"/api/ensemble", ""},
		{"/api/unknown", ""}, {"/assets/app.js", ""}, {"/assets/../page.go", ""}, {"/nothing", "a=b"},
	} {
		f.Add(seed.path, seed.query)
	}
	_, s := lockFixture(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, path, query string) {
		if path == "/api/events" {
			return // a stream: it does not end by itself
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path, r.URL.RawPath, r.URL.RawQuery = path, "", query
		r.RemoteAddr = "127.0.0.1:50000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMovedPermanently,
			http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			t.Fatalf("GET %q ? %q: %d %s", path, query, w.Code, w.Body.String())
		}
		if strings.HasPrefix(path, "/api/") && w.Code == http.StatusBadRequest {
			var body struct{ Error string }
			if json.Unmarshal(w.Body.Bytes(), &body) != nil || body.Error == "" {
				t.Fatalf("GET %q ? %q: 400 without a JSON message: %s", path, query, w.Body.String())
			}
		}
	})
}
