package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"time"
)

// --- event streams -----------------------------------------------------------

// Why a stream is refused, as Options.Refused hears it.
const (
	RefusedStreamsTotal   = "streams_total"
	RefusedStreamsPerAddr = "streams_per_address"
)

// Streams is how many event streams are open.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// subscribe opens a stream for a client at addr: ch receives each changed
// state (a newer one replaces one not yet taken). When too many are open,
// in all or from addr, ch is nil and refused says which.
func (s *Server) subscribe(addr netip.Addr) (ch chan []byte, refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.streams) >= s.o.MaxStreams:
		return nil, RefusedStreamsTotal
	case s.perAddr[addr] >= s.o.MaxStreamsPerAddr:
		return nil, RefusedStreamsPerAddr
	}
	ch = make(chan []byte, 1)
	s.streams[ch] = addr
	s.perAddr[addr]++
	return ch, ""
}

func (s *Server) unsubscribe(ch chan []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := s.streams[ch]
	delete(s.streams, ch)
	if s.perAddr[addr]--; s.perAddr[addr] <= 0 {
		delete(s.perAddr, addr)
	}
}

// remoteAddr is the client's address, the key of its streams; the zero
// Addr when RemoteAddr is not host:port (all such clients share it).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// broadcast builds the state and hands it to every stream if it changed.
func (s *Server) broadcast(ctx context.Context) {
	body, err := json.Marshal(s.state(ctx))
	if err != nil {
		s.o.Log.Warn("status page state", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Equal(body, s.last) {
		return
	}
	s.last = body
	for ch := range s.streams {
		select {
		case <-ch:
		default:
		}
		ch <- body
	}
}

// withTime is a state's JSON with the server's time put first.
func withTime(body []byte, now time.Time) []byte {
	ts, _ := json.Marshal(now.UTC().Truncate(time.Millisecond))
	out := make([]byte, 0, len(body)+len(ts)+16)
	out = append(out, `{"server_time":`...)
	out = append(out, ts...)
	if len(body) > 2 {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// keepAlive is how often an idle stream gets a comment, so that proxies
// and the browser see it alive and a gone client is noticed.
const keepAlive = 15 * time.Second

// streamWrite bounds one write to a stream: a client that does not read
// is dropped rather than held.
const streamWrite = 10 * time.Second

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		badRequest(w, "no parameters taken")
		return
	}
	addr := remoteAddr(r)
	ch, refused := s.subscribe(addr)
	switch refused {
	case RefusedStreamsTotal:
		s.o.Refused(refused)
		jsonError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams open: %d in all, the most this member serves", s.o.MaxStreams))
		return
	case RefusedStreamsPerAddr:
		s.o.Refused(refused)
		jsonError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams open from %s: %d, the most one address may hold; close a page", addr, s.o.MaxStreamsPerAddr))
		return
	}
	defer s.unsubscribe(ch)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWrite))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	event := func(body []byte) bool {
		msg := make([]byte, 0, len(body)+64)
		msg = append(msg, "event: state\ndata: "...)
		msg = append(msg, withTime(body, s.o.Now())...)
		return send(append(msg, "\n\n"...))
	}
	// The first state at once; reconnecting browsers wait 2s.
	first, err := json.Marshal(s.state(r.Context()))
	if err != nil || !send([]byte("retry: 2000\n\n")) || !event(first) {
		return
	}
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case body := <-ch:
			if !event(body) {
				return
			}
		case <-t.C:
			if !send([]byte(": ok\n\n")) {
				return
			}
		}
	}
}
