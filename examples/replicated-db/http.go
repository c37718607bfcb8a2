package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// forwardedHeader marks a write a follower forwarded: the receiver does
// not forward it again, so a stale view of the leader cannot loop.
const forwardedHeader = "X-Replicated-DB-Forwarded-By"

// maxValue bounds a value, and so a request body.
const maxValue = 1 << 20

func (n *node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kv/{key...}", n.handleGet)
	mux.HandleFunc("PUT /kv/{key...}", n.handlePut)
	mux.HandleFunc("GET /kv", n.handleDump)
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.view()) })
	mux.HandleFunc("POST /internal/push", n.handlePush)
	mux.HandleFunc("POST /internal/join", n.handleJoin)
	return mux
}

// readable refuses reads on a node still copying the data: what it holds
// may be far behind.
func (n *node) readable(w http.ResponseWriter) bool {
	n.mu.Lock()
	role := n.role
	n.mu.Unlock()
	if role == roleJoining {
		http.Error(w, "joining: copying the data from the leader", http.StatusServiceUnavailable)
		return false
	}
	return true
}

func (n *node) handleGet(w http.ResponseWriter, r *http.Request) {
	if !n.readable(w) {
		return
	}
	n.mu.Lock()
	v, ok := n.st.data[r.PathValue("key")]
	n.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	io.WriteString(w, v)
}

// dump is the whole store, as GET /kv shows it.
type dump struct {
	Version version           `json:"version"`
	Data    map[string]string `json:"data"`
}

func (n *node) handleDump(w http.ResponseWriter, r *http.Request) {
	if !n.readable(w) {
		return
	}
	n.mu.Lock()
	d := dump{Version: n.st.version, Data: make(map[string]string, len(n.st.data))}
	for k, v := range n.st.data {
		d.Data[k] = v
	}
	n.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

func (n *node) handlePut(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" {
		http.Error(w, "empty key", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	v, err := n.put(key, string(body))
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]any{"version": v, "leader": n.cfg.Name})
	case errors.Is(err, errUnacknowledged):
		// Applied here and maybe on some followers; the next leader may
		// keep it or drop it.
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, errNotLeader) && r.Header.Get(forwardedHeader) == "":
		n.forward(w, r, key, body)
	case errors.Is(err, errNotLeader):
		http.Error(w, "not the leader (forwarded by "+r.Header.Get(forwardedHeader)+")", http.StatusServiceUnavailable)
	default:
		http.Error(w, "refused: "+err.Error(), http.StatusServiceUnavailable)
	}
}

// forward sends a write to the leader this node last observed and relays
// its answer.
func (n *node) forward(w http.ResponseWriter, r *http.Request, key string, body []byte) {
	n.mu.Lock()
	l := n.leader
	n.mu.Unlock()
	if l.Name == "" || l.Name == n.cfg.Name {
		http.Error(w, "no leader at the moment", http.StatusServiceUnavailable)
		return
	}
	u := url.URL{Scheme: "http", Host: l.Addr, Path: "/kv/" + key}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, u.String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header.Set(forwardedHeader, n.cfg.Name)
	resp, err := n.fwd.Do(req)
	if err != nil {
		// The outcome is unknown: the leader may have acknowledged it
		// just before the connection broke.
		http.Error(w, fmt.Sprintf("leader %s unreachable, write outcome unknown: %v", l.Name, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (n *node) handlePush(w http.ResponseWriter, r *http.Request) {
	var p push
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, n.receive(p))
}

func (n *node) handleJoin(w http.ResponseWriter, r *http.Request) {
	var m memberInfo
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m.Name == "" || m.Addr == "" {
		http.Error(w, "want {name, addr}", http.StatusBadRequest)
		return
	}
	if err := n.admit(m); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func postJSON(ctx context.Context, hc *http.Client, url string, v any) (*http.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return hc.Do(req)
}

// readError renders a non-200 answer.
func readError(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
}
