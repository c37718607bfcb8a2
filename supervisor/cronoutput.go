package supervisor

import (
	"io"
	"os"
	"sync"
	"time"
)

// Output kept with a firing's record: the job's stdout and stderr, merged
// in the order they came, still go where the cron process's stdout goes
// (the journal, under systemd), and their last bytes are kept for the
// record.

// defaultOutputBytes is how much output a record keeps unless told.
const defaultOutputBytes = 64 << 10

// maxOutputBytes bounds output-bytes: the record is one znode, and
// ZooKeeper's default limit for one is just under 1 MiB.
const maxOutputBytes = 512 << 10

// tail keeps the last n bytes written to it, and counts them all.
type tail struct {
	mu    sync.Mutex // guards buf and total
	n     int
	buf   []byte
	total int64
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func (t *tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// capture is the pipe a job writes its output to, stdout and stderr both
// (as 2>&1 would: one pipe keeps their order), copied through to this
// process's stdout and into a tail of n bytes.
type capture struct {
	t              *tail
	w, r           *os.File
	copied         sync.WaitGroup
	closeWriteOnce sync.Once
}

func newCapture(n int) (*capture, error) {
	c := &capture{t: &tail{n: n}}
	var err error
	if c.r, c.w, err = os.Pipe(); err != nil {
		return nil, err
	}
	c.copied.Add(1)
	go func() {
		defer c.copied.Done()
		defer c.r.Close()
		_, _ = io.Copy(io.MultiWriter(os.Stdout, c.t), c.r)
	}()
	return c, nil
}

// finish closes this process's ends of the pipes once the job is done,
// and waits up to wait for what is still in them: a job's background
// children may hold them open long after, and the record does not wait
// for those.
func (c *capture) finish(wait time.Duration) (string, int64) {
	c.closeWriteOnce.Do(func() { c.w.Close() })
	done := make(chan struct{})
	// Not joined past wait: it ends once the copy does, when the job's
	// last background child lets go of the pipe.
	go func() { c.copied.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// Stop copying: the holders get EPIPE from now on.
		c.r.Close()
	}
	return c.t.String(), c.t.Total()
}
