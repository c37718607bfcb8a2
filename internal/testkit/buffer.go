package testkit

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a bytes.Buffer that goroutines may write and read at
// once: a process's output, or the log of members under test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Take returns everything written so far and forgets it.
func (s *SyncBuffer) Take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}

// HasLine reports whether one line written so far contains every one of
// parts.
func (s *SyncBuffer) HasLine(parts ...string) bool {
	for _, line := range strings.Split(s.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
