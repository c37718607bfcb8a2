package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coordrun/coordrun/internal/failpoint"
	"github.com/coordrun/coordrun/internal/testkit"
)

// Disk faults. A cluster started with Config.DiskBytes gives every member
// a data dir on a small filesystem of its own: a tmpfs of that size,
// mounted in a mount namespace that a holder process keeps (unshare -rm,
// which needs no root where unprivileged user namespaces are allowed),
// and every start of the member enters (nsenter). The filesystem thus
// outlives the member's restarts, and the harness reaches it through
// /proc/HOLDER/root. With Config.Failpoints (a binary built with -tags
// failpoint) the harness can fail a member's writes and syncs.

// diskHolder keeps a member's small filesystem mounted.
type diskHolder struct {
	proc *testkit.Process
}

// startHolder mounts a tmpfs of size bytes on dir in a new user and
// mount namespace, and returns once it is mounted.
func startHolder(dir string, size int64) (*diskHolder, error) {
	script := fmt.Sprintf("mount -t tmpfs -o size=%d tmpfs %s && echo mounted && exec sleep 1000000", size, strconv.Quote(dir))
	cmd := exec.Command("unshare", "-rm", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := testkit.StartProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("chaos: unshare: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "mounted\n" {
		p.Kill()
		return nil, fmt.Errorf("chaos: a %d-byte tmpfs on %s in a namespace of its own: %v %s", size, dir, err, stderr.String())
	}
	return &diskHolder{proc: p}, nil
}

// command runs bin inside the holder's namespaces.
func (h *diskHolder) command(bin string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(h.proc.Pid()), "-U", "-m", "--preserve-credentials", "--", bin}, args...)...)
}

// path is where the harness sees path of the holder's namespace.
func (h *diskHolder) path(p string) string {
	return filepath.Join("/proc", strconv.Itoa(h.proc.Pid()), "root", p)
}

func (h *diskHolder) close() { h.proc.Kill() }

// dataPath is where the harness reaches member m's data dir.
func (c *Cluster) dataPath(m *member) string {
	if m.disk != nil {
		return m.disk.path(m.dir)
	}
	return m.dir
}

// Rebuild replaces member i's disk the way an operator would: stop it,
// remove it from the ensemble, wipe its data dir, start it with --join,
// add it back, and wait until it has caught up.
func (c *Cluster) Rebuild(ctx context.Context, i int) error {
	m := c.members[i]
	if err := c.Kill(i); err != nil {
		return err
	}
	if err := c.admin(ctx, i, "ensemble", "remove", m.id); err != nil {
		return err
	}
	if err := c.wipe(m); err != nil {
		return err
	}
	m.join = true
	if err := c.startMember(m); err != nil {
		return err
	}
	if err := c.admin(ctx, i, "ensemble", "add", m.id, m.peerProx.Addr()); err != nil {
		return err
	}
	return c.WaitHealthy(ctx)
}

// wipe empties member m's data dir (a mount point stays in place).
func (c *Cluster) wipe(m *member) error {
	dir := c.dataPath(m)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// failpointFile is the file member m's failpoints are read from.
func (c *Cluster) failpointFile(m *member) string {
	return filepath.Join(c.cfg.Dir, "member-"+m.id+".failpoints")
}

// ArmFailpoints makes member i's failpoints spec (NAME=ERRNO lines, see
// internal/failpoint) take effect at its next write; "" disarms them.
func (c *Cluster) ArmFailpoints(i int, spec string) error {
	f := c.failpointFile(c.members[i])
	if spec == "" {
		err := os.Remove(f)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f)
}

// ballast is the file that fills a member's filesystem.
const ballast = "ballast"

// Fill fills member i's small filesystem to the last byte.
func (c *Cluster) Fill(i int) error {
	m := c.members[i]
	if m.disk == nil {
		return errors.New("chaos: Fill needs Config.DiskBytes")
	}
	f, err := os.OpenFile(filepath.Join(c.dataPath(m), ballast), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, n := range []int{1 << 20, 4096} {
		buf := make([]byte, n)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					return err
				}
				break
			}
		}
	}
	return nil
}

// Unfill frees what Fill took.
func (c *Cluster) Unfill(i int) error {
	err := os.Remove(filepath.Join(c.dataPath(c.members[i]), ballast))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// WaitExit waits up to d for member i to end by itself, and returns its
// exit code.
func (c *Cluster) WaitExit(i int, d time.Duration) (int, error) {
	c.procMu.Lock()
	m := c.members[i]
	p := m.proc
	c.procMu.Unlock()
	if p == nil {
		return 0, fmt.Errorf("chaos: member %s is not running", m.id)
	}
	code, ok := p.Wait(d)
	if !ok {
		return 0, fmt.Errorf("chaos: member %s still runs %s after its fault", m.id, d)
	}
	c.procMu.Lock()
	m.proc, m.paused = nil, false
	c.procMu.Unlock()
	m.clientProxy.Cut()
	m.peerProx.Cut()
	return code, nil
}

// memberCommand is the command that runs member m with args: inside its
// small filesystem's namespace when it has one, with its failpoint file
// when the cluster has failpoints.
func (c *Cluster) memberCommand(m *member, args []string) *exec.Cmd {
	var cmd *exec.Cmd
	if m.disk != nil {
		cmd = m.disk.command(c.bin, args...)
	} else {
		cmd = exec.Command(c.bin, args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if c.cfg.Failpoints {
		cmd.Env = append(os.Environ(), "COORDRUN_FAILPOINTS_FILE="+c.failpointFile(m))
	}
	return cmd
}

// diskFault injects one disk fault of kind, holds it, and undoes it.
func (n *nemesis) diskFault(ctx context.Context, kind string, hold func()) error {
	c := n.c
	switch kind {
	case FaultFsync, FaultFsyncLeader:
		i := n.rng.IntN(c.N())
		if kind == FaultFsyncLeader {
			i = n.leader(ctx)
		}
		n.logf("fail fsync on member %d", i+1)
		if err := c.ArmFailpoints(i, failpoint.StoreSync+"=EIO"); err != nil {
			return err
		}
		// Writes keep coming from the workload; the member's next append
		// fails, and it must end rather than serve on.
		code, err := c.WaitExit(i, 30*time.Second)
		if err != nil {
			return err
		}
		if err := c.ArmFailpoints(i, ""); err != nil {
			return err
		}
		b, err := os.ReadFile(c.LogPath(i))
		if err != nil {
			return err
		}
		if want := filepath.Join(c.members[i].dir, "raft.db") + ": raft log write failed"; code == 0 || !bytes.Contains(b, []byte(want)) {
			return fmt.Errorf("member %d exited %d without saying %q", i+1, code, want)
		}
		hold()
		return c.Restart(i)
	case FaultDiskFull, FaultDiskFullAll:
		who := []int{n.rng.IntN(c.N())}
		if n.rng.IntN(2) == 0 {
			who[0] = n.leader(ctx)
		}
		if kind == FaultDiskFullAll {
			who = n.rng.Perm(c.N())
		}
		n.logf("fill the disk of members %v", plusOne(who))
		for _, i := range who {
			if err := c.Fill(i); err != nil {
				return err
			}
		}
		hold()
		// Whether a member ran out of room depends on the writes during
		// the hold (bbolt reuses the pages it freed): counted, so that a
		// run shows how many fills bit.
		for _, i := range who {
			if b, err := os.ReadFile(c.LogPath(i)); err == nil && bytes.Count(b, []byte("data dir is full")) > n.fullSeen[i] {
				n.fullSeen[i] = bytes.Count(b, []byte("data dir is full"))
				n.faults["disk-full-alarm"]++
			}
		}
		for _, i := range who {
			if err := c.Unfill(i); err != nil {
				return err
			}
		}
	}
	return nil
}
