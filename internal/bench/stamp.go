package main

// The job the lock workloads run: a tiny static ELF (stampCode) that
// writes two CLOCK_REALTIME readings, so a handoff is timed from the
// previous job's last instruction to the next job's first.

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	if os.Getenv(stampEnv) == "1" {
		stampMain()
	}
}

// stampMain is the job when the bench binary itself is the job: the same
// two readings and write as the static helper, then exit, or with an
// argument, wait for a signal.
func stampMain() {
	var b [32]byte
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	binary.LittleEndian.PutUint64(b[0:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(b[8:], uint64(ts.Nsec))
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	binary.LittleEndian.PutUint64(b[16:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(b[24:], uint64(ts.Nsec))
	_, _ = syscall.Write(1, b[:])
	if len(os.Args) > 1 {
		for {
			time.Sleep(time.Hour) // until a signal ends it
		}
	}
	syscall.Exit(0)
}

// stampCode is the static helper's machine code (x86-64, no libc):
//
//	mov r12,[rsp]              ; argc
//	sub rsp,32
//	clock_gettime(CLOCK_REALTIME, rsp)      ; start
//	clock_gettime(CLOCK_REALTIME, rsp+16)   ; end
//	write(1, rsp, 32)
//	if argc > 1: for { pause() }
//	exit_group(0)
var stampCode = []byte{
	0x4c, 0x8b, 0x24, 0x24, 0x48, 0x83, 0xec, 0x20, 0xb8, 0xe4, 0x00, 0x00,
	0x00, 0x31, 0xff, 0x48, 0x89, 0xe6, 0x0f, 0x05, 0xb8, 0xe4, 0x00, 0x00,
	0x00, 0x31, 0xff, 0x48, 0x8d, 0x74, 0x24, 0x10, 0x0f, 0x05, 0xb8, 0x01,
	0x00, 0x00, 0x00, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x48, 0x89, 0xe6, 0xba,
	0x20, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x49, 0x83, 0xfc, 0x01, 0x7e, 0x09,
	0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, 0xb8, 0xe7, 0x00,
	0x00, 0x00, 0x31, 0xff, 0x0f, 0x05,
}

// elf64 wraps x86-64 code in a minimal static executable: the ELF header
// and one loadable segment holding the whole file.
func elf64(code []byte) []byte {
	const base, hdr = 0x400000, 64 + 56
	b := make([]byte, hdr+len(code))
	le := binary.LittleEndian
	copy(b, "\x7fELF\x02\x01\x01") // 64-bit, little endian, version 1
	le.PutUint16(b[16:], 2)        // ET_EXEC
	le.PutUint16(b[18:], 62)       // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+hdr) // entry
	le.PutUint64(b[32:], 64)       // program headers right after this one
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	p := b[64:]
	le.PutUint32(p[0:], 1) // PT_LOAD
	le.PutUint32(p[4:], 5) // R+X
	le.PutUint64(p[16:], base)
	le.PutUint64(p[24:], base)
	le.PutUint64(p[32:], uint64(len(b)))
	le.PutUint64(p[40:], uint64(len(b)))
	le.PutUint64(p[48:], 0x1000)
	copy(b[hdr:], code)
	return b
}

// stamper is the job the supervisors run.
type stamper struct {
	path string
	env  []string // the supervisors' environment (nil: inherit)
	desc string
}

// newStamper writes the static helper into dir, or falls back to the
// bench binary itself; either way it checks that the job works.
func newStamper(dir string) (*stamper, error) {
	var st *stamper
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		p := filepath.Join(dir, "stamp")
		if err := os.WriteFile(p, elf64(stampCode), 0o755); err != nil {
			return nil, err
		}
		st = &stamper{path: p, desc: fmt.Sprintf("a %d-byte static x86-64 ELF (2 clock_gettime, write, exit_group)", len(stampCode)+120)}
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		st = &stamper{path: exe, env: append(os.Environ(), stampEnv+"=1"), desc: "the bench binary re-executed (" + stampEnv + "=1)"}
	}
	cmd := exec.Command(st.path)
	cmd.Env = st.env
	out, err := cmd.Output()
	if err != nil || len(out) != 32 {
		return nil, fmt.Errorf("job helper %s: %v, %d bytes of output", st.path, err, len(out))
	}
	return st, nil
}

// stamp is what one job wrote (or when an in-process holder held).
type stamp struct {
	start, end time.Time
	// stalled: this holder's wake-up was lost and the harness had to
	// rescue it, so the handoff into it measures the rescue, not the lock.
	stalled bool
}

func readStamp(path string) (stamp, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 32 {
		return stamp{}, false
	}
	le := binary.LittleEndian
	at := func(o int) time.Time { return time.Unix(int64(le.Uint64(b[o:])), int64(le.Uint64(b[o+8:]))) }
	return stamp{start: at(0), end: at(16)}, true
}
