package ensemble

import (
	"bufio"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	runtimemetrics "runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the four-letter words report of the process and the machine, as
// ZooKeeper reports them of its JVM: read from /proc where Linux has it,
// with a plain fallback elsewhere.

// processStart stands for the member's start in zk_uptime: the package is
// initialised as the process starts, and `coordrun server` runs one
// member per process.
var processStart = time.Now()

// openFileDescriptors counts the process's open descriptors, as the JVM
// does for ZooKeeper: the entries of /proc/self/fd less the one the
// listing itself holds open. -1 where there is no /proc.
func openFileDescriptors() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1
}

// maxFileDescriptors is the soft limit on open descriptors, -1 if unknown.
func maxFileDescriptors() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > math.MaxInt64 {
		return -1
	}
	return int64(rl.Cur)
}

// kernelName and kernelRelease are what the JVM calls os.name and
// os.version ("Linux", "6.1.0-18-amd64").
func kernelName() string {
	if b, err := os.ReadFile("/proc/sys/kernel/ostype"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return runtime.GOOS
}

func kernelRelease() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return "unknown"
}

// memoryFigures are the JVM's os.memory.free, .max and .total for the Go
// runtime, in bytes: heap memory held but unused, the most the heap may
// grow to (GOMEMLIMIT, else the machine's memory), and all the runtime
// has mapped. runtime/metrics reads them without stopping the world.
func memoryFigures() (free, limit, total uint64) {
	s := []runtimemetrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/gomemlimit:bytes"},
		{Name: "/memory/classes/total:bytes"},
	}
	runtimemetrics.Read(s)
	val := func(i int) uint64 {
		if s[i].Value.Kind() != runtimemetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	free, limit, total = val(0), val(1), val(2)
	if limit == 0 || limit >= math.MaxInt64 {
		limit = physicalMemory()
		if limit == 0 {
			limit = total
		}
	}
	return free, limit, total
}

// physicalMemory is MemTotal of /proc/meminfo in bytes, 0 if unknown.
func physicalMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// dirSize sums the sizes of the regular files under dir: ZooKeeper's
// dataDirSize and dataLogSize. Files that vanish during the walk (a
// snapshot being replaced) are skipped.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}
