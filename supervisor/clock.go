package supervisor

import (
	"time"

	"golang.org/x/sys/unix"
)

// Boottime is a clock shared by every process on the host: nanoseconds
// since boot, including time spent suspended. The supervisor and its
// watchdog exchange deadlines on it, so a wall-clock step cannot move a
// kill deadline, and a host that slept past a lease finds it expired.
type Boottime int64

// BoottimeNow reads CLOCK_BOOTTIME.
func BoottimeNow() Boottime {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock_gettime(CLOCK_BOOTTIME): " + err.Error())
	}
	return Boottime(ts.Nano())
}

// boottimeAt converts a time on this process's monotonic clock to
// boottime.
func boottimeAt(t time.Time) Boottime {
	return BoottimeNow() + Boottime(time.Until(t))
}

// Until is the duration from now until b.
func (b Boottime) Until() time.Duration { return time.Duration(b - BoottimeNow()) }
