package supervisor

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A firing's output. The job's stdout and stderr go to this process's
// stdout and stderr (the journal, under systemd), kept apart, each line
// prefixed with the job's name (and the attempt after the first): several
// jobs' output shares one journal, and a reader must tell whose line is
// whose. Their last bytes are kept for the record, merged in the order
// they were read.

// defaultOutputBytes is how much output a record keeps unless told.
const defaultOutputBytes = 64 << 10

// maxOutputBytes bounds output-bytes: the record is one znode, and
// ZooKeeper's default limit for one is just under 1 MiB.
const maxOutputBytes = 512 << 10

// maxJournalLine bounds a line of a job's output in the journal: a longer
// one is cut into lines of this size, each prefixed. It bounds what a job
// that never ends a line can make this process hold, and stays below
// journald's own LineMax (48 KiB by default), past which journald would
// cut the line itself, without the prefix.
const maxJournalLine = 16 << 10

// outputPrefix is what starts each of a firing's lines in the journal:
// "backup: ", or "backup#2: " for its second attempt.
func outputPrefix(job string, attempt int) string {
	if attempt > 1 {
		return job + "#" + strconv.Itoa(attempt) + ": "
	}
	return job + ": "
}

// prefixer writes each line written to it to w with prefix, one Write
// per line so that the lines of concurrent jobs do not mix; a line longer
// than max is cut. Flush writes what is left of an unended line. Not
// safe for concurrent use: each stream has its own.
type prefixer struct {
	w      io.Writer
	prefix string
	max    int
	line   []byte // the unended line so far, at most max bytes
	// cuts counts the lines cut at max: read by the metrics while a
	// job's background child may still be writing.
	cuts *atomic.Int64
}

func newPrefixer(w io.Writer, prefix string, max int) *prefixer {
	return &prefixer{w: w, prefix: prefix, max: max, cuts: new(atomic.Int64)}
}

func (p *prefixer) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		room := p.max - len(p.line)
		if len(chunk) > room {
			// The line goes past the bound: out goes a full piece, and
			// the rest starts a line of its own.
			p.line = append(p.line, chunk[:room]...)
			b = b[room:]
			p.cuts.Add(1)
			if err := p.emit(); err != nil {
				return n - len(b), err
			}
			continue
		}
		p.line = append(p.line, chunk...)
		if i < 0 {
			break
		}
		b = b[i+1:]
		if err := p.emit(); err != nil {
			return n - len(b), err
		}
	}
	return n, nil
}

// Flush ends an unended line.
func (p *prefixer) Flush() error {
	if len(p.line) == 0 {
		return nil
	}
	return p.emit()
}

func (p *prefixer) emit() error {
	out := make([]byte, 0, len(p.prefix)+len(p.line)+1)
	out = append(append(append(out, p.prefix...), p.line...), '\n')
	p.line = p.line[:0]
	_, err := p.w.Write(out)
	return err
}

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

// capture is the pair of pipes a job writes its stdout and stderr to,
// each copied, line by line with prefix, to stdout and stderr, and both
// into a tail of n bytes.
type capture struct {
	t              *tail
	cuts           *atomic.Int64 // lines cut, both streams
	w, r           [2]*os.File   // stdout's and stderr's pipe
	copied         sync.WaitGroup
	closeWriteOnce sync.Once
}

// newCapture makes the pipes and starts copying them; stdout and stderr
// are where the lines go (this process's own, in coordrun cron).
func newCapture(n int, prefix string, stdout, stderr io.Writer) (*capture, error) {
	c := &capture{t: &tail{n: n}, cuts: new(atomic.Int64)}
	for i, dst := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			c.closeAll()
			return nil, err
		}
		c.r[i], c.w[i] = r, w
		lines := newPrefixer(dst, prefix, maxJournalLine)
		lines.cuts = c.cuts
		c.copied.Add(1)
		go func() {
			defer c.copied.Done()
			defer r.Close()
			_, _ = io.Copy(io.MultiWriter(lines, c.t), r)
			// A last line without its newline still reaches the journal.
			_ = lines.Flush()
		}()
	}
	return c, nil
}

// closeAll closes the pipes made so far (a failed start).
func (c *capture) closeAll() {
	for i := range c.r {
		if c.r[i] != nil {
			c.r[i].Close()
			c.w[i].Close()
		}
	}
}

// finish closes this process's ends of the pipes once the job is done,
// and waits up to wait for what is still in them: a job's background
// children may hold them open long after, and the record does not wait
// for those.
func (c *capture) finish(wait time.Duration) (string, int64) {
	c.closeWriteOnce.Do(func() { c.w[0].Close(); c.w[1].Close() })
	done := make(chan struct{})
	// Not joined past wait: it ends once the copies do, when the job's
	// last background child lets go of the pipes.
	go func() { c.copied.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// Stop copying: the holders get EPIPE from now on.
		c.r[0].Close()
		c.r[1].Close()
	}
	return c.t.String(), c.t.Total()
}
