package state

import (
	"strings"
	"testing"
	"time"
)

// The one rule of a lingering holder: not ephemeral, its session gone, or
// silent past two missed pings (two thirds of its timeout).
func TestLingering(t *testing.T) {
	silent := func(s, of time.Duration) *Silence { return &Silence{Silent: s, Timeout: of} }
	for _, c := range []struct {
		l    Liveness
		want string
	}{
		{Liveness{}, ""},
		{Liveness{Silence: silent(3*time.Second, 10*time.Second)}, ""},
		{Liveness{Silence: silent(6600*time.Millisecond, 10*time.Second)}, ""},
		{Liveness{Silence: silent(6700*time.Millisecond, 10*time.Second)}, "silent for 6.7s of its 10s timeout"},
		{Liveness{Silence: silent(time.Hour, 0)}, ""},
		{Liveness{Persistent: true, Silence: silent(time.Hour, time.Second)}, "not ephemeral"},
		{Liveness{Gone: true}, "session is gone"},
	} {
		got := Lingering(c.l)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Lingering(%+v) = %q, want %q", c.l, got, c.want)
		}
	}
}
