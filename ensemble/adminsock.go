package ensemble

// The admin socket (Config.AdminSocket): a Unix socket that serves the
// same client protocol as the client port, sessions, four-letter words and
// snapshots, to the member's administrator. The kernel tells the uid of
// the process at the other end (SO_PEERCRED), which no network address
// can: a connection from an allowed uid (root and the member's own by
// default, Config.AdminSocketUIDs otherwise) is the super user; any other
// is refused with a line that says so. The socket file is made 0600 (0660
// when other uids are allowed, who then need the member's group), and is
// removed when the member closes.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"slices"
	"time"
)

// adminConn is a connection accepted on the admin socket from an allowed
// uid; the type itself is what makes it the super user (adminid.go).
type adminConn struct {
	net.Conn
	uid int
}

// RemoteAddr names the peer by its uid: an admin socket's clients are
// unnamed, and logs and stat should still say who it was.
func (c *adminConn) RemoteAddr() net.Addr {
	return &net.UnixAddr{Name: fmt.Sprintf("uid=%d@admin-socket", c.uid), Net: "unix"}
}

// adminUIDs are the uids allowed on the admin socket.
func (m *Member) adminUIDs() []int {
	if len(m.cfg.AdminSocketUIDs) > 0 {
		return m.cfg.AdminSocketUIDs
	}
	if os.Getuid() == 0 {
		return []int{0}
	}
	return []int{0, os.Getuid()}
}

// listenAdminSocket opens Config.AdminSocket, if set. A socket file left
// by a member that died is replaced; one that answers is another member's,
// and anything that is not a socket is left alone.
func (m *Member) listenAdminSocket() error {
	path := m.cfg.AdminSocket
	if path == "" {
		return nil
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("admin socket %s: exists and is not a socket; remove it or choose another --admin-socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("admin socket %s: another process serves it", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("admin socket %s: stale socket: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("admin socket: %w", err)
	}
	// Until the chmod the file has the umask's mode; the uid check below
	// is what guards the socket, the mode only keeps others from trying.
	mode := os.FileMode(0o600)
	if slices.ContainsFunc(m.adminUIDs(), func(u int) bool { return u != 0 && u != os.Getuid() }) {
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return fmt.Errorf("admin socket: %w", err)
	}
	m.adminSock = ln
	m.log.Info("admin socket", "path", path, "uids", m.adminUIDs())
	return nil
}

// acceptAdminSocket serves the admin socket until the member closes. A
// temporary accept error (out of file descriptors) is waited out, never
// the end of the socket.
func (m *Member) acceptAdminSocket() {
	backoff := 5 * time.Millisecond
	for {
		nc, err := m.adminSock.Accept()
		if err != nil {
			if m.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			m.log.Warn("admin socket accept", "err", err, "retry_in", backoff)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		uid, err := peerUID(nc)
		if err == nil && !slices.Contains(m.adminUIDs(), uid) {
			err = fmt.Errorf("uid %d may not use the admin socket of this member (allowed: %v; --admin-socket-uids)", uid, m.adminUIDs())
		}
		if err != nil {
			m.stats.refused.WithLabelValues(refusedSocket).Inc()
			m.log.Warn("admin socket connection refused", "err", err)
			m.tr.Go(func() { refuse(nc, err) })
			continue
		}
		ac := &adminConn{Conn: nc, uid: uid}
		if !m.clients.accept(ac) {
			continue
		}
		m.stats.connections.Add(1)
		m.tr.Go(func() {
			defer m.stats.connections.Add(-1)
			defer m.clients.done(ac)
			m.serveClient(ac)
		})
	}
}

// refuse tells a refused client why in one line and closes. What it sent
// is read first (for a second at most): closing with unread data would
// reset the connection, and the client might lose the line.
func refuse(nc net.Conn, why error) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(nc, "error: %v\n", why)
	if uc, ok := nc.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, 64<<10))
}

// peerUID is the uid of the process that connected nc, a Unix socket.
func peerUID(nc net.Conn) (int, error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var uid int
	var credErr error
	if err := raw.Control(func(fd uintptr) { uid, credErr = socketPeerUID(fd) }); err != nil {
		return 0, err
	}
	return uid, credErr
}
