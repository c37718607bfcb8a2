package ensemble

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
)

// scriptedListener returns the errors of its script, one per Accept, and
// then real connections from its inner listener.
type scriptedListener struct {
	net.Listener
	mu     sync.Mutex // guards script
	script []error
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.script) > 0 {
		err := l.script[0]
		l.script = l.script[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// EMFILE and its kind are retried, never the end of the loop; the episode
// is logged once, every error counted, and the loop goes on accepting.
func TestAcceptLoopRetries(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: &net.OpError{Err: syscall.EMFILE}}
	inner := testkit.Listen(t)
	ln := &scriptedListener{Listener: inner, script: []error{emfile, emfile, emfile, syscall.ECONNABORTED, emfile}}
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var st acceptState
	done := make(chan struct{})
	got := make(chan net.Conn, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		acceptLoop("client", ln, &st, done, log, func(c net.Conn) { got <- c })
	}()
	nc, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := testkit.Recv(t, got, 5*time.Second, "a connection after five failed accepts")
	c.Close()
	if n := st.errors.Load(); n != 5 {
		t.Errorf("%d accept errors counted, want 5", n)
	}
	if err := st.err(time.Now()); err != nil {
		t.Errorf("still failing after an accept succeeded: %v", err)
	}
	if n := strings.Count(logs.String(), "client accept failing"); n != 1 {
		t.Errorf("the episode was logged %d times:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "client accept recovered") {
		t.Errorf("no recovery logged:\n%s", logs.String())
	}
	close(done)
	inner.Close()
	testkit.Recv(t, ended, 5*time.Second, "the loop to end once closed")
}

// A failure counts against the port while it is fresh: a port that keeps
// failing is reported, one that failed once and then saw no client is not
// for long.
func TestAcceptStateFreshness(t *testing.T) {
	var st acceptState
	t0 := time.Unix(1000, 0)
	if !st.fail(errors.New("emfile"), t0) {
		t.Fatal("the first error did not start an episode")
	}
	if st.fail(errors.New("emfile"), t0.Add(time.Second)) {
		t.Error("a second error started another episode")
	}
	if st.err(t0.Add(2*time.Second)) == nil {
		t.Error("a port failing a second ago reported fine")
	}
	if err := st.err(t0.Add(time.Second + acceptErrorFresh + time.Millisecond)); err != nil {
		t.Errorf("a stale failure still reported: %v", err)
	}
	var delays []string
	d := time.Duration(0)
	for range 10 {
		d = nextAcceptDelay(d)
		delays = append(delays, d.String())
	}
	if got := fmt.Sprint(delays); got != "[5ms 10ms 20ms 40ms 80ms 160ms 320ms 640ms 1s 1s]" {
		t.Errorf("backoff %s", got)
	}
}
