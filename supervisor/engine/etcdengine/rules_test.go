package etcdengine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/supervisor/state"
)

func TestParseServers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // endpoints comma-joined, or the error's text
		ok   bool
	}{
		{"etcd://10.0.0.1:2379,etcd://10.0.0.2:2379", "10.0.0.1:2379,10.0.0.2:2379", true},
		{"etcd://a:2379, b:2380", "a:2379,b:2380", true},
		{"etcd://a", "a:2379", true},
		{"etcd://[::1]:2379", "[::1]:2379", true},
		{"etcd://a:2379/v3", "has a path", false},
		{"etcd://a:2379?x=1", "has a path or query", false},
		{"etcd://a:0", "not a number from 1 to 65535", false},
		{"etcd://a:http", "not etcd://host:port", false},
		{"etcd://u:p@a:2379", "--auth", false},
		{"etcd://a:2379,zk://b:2181", "one engine per invocation", false},
		{"etcd://", "names no host", false},
	} {
		eps, err := ParseServers(tc.in)
		if tc.ok {
			if err != nil || strings.Join(eps, ",") != tc.want {
				t.Errorf("ParseServers(%q) = %v, %v; want %s", tc.in, eps, err, tc.want)
			}
			continue
		}
		var ce *ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseServers(%q) error %v; want a ConfigError saying %q", tc.in, err, tc.want)
		}
	}
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{"": "/coordrun/", "/app": "/app/", "/app/": "/app/", "/": "/"} {
		if got, err := NormalizePrefix(in); err != nil || got != want {
			t.Errorf("NormalizePrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"app/", "/a//b/", "/a\x00/"} {
		if _, err := NormalizePrefix(bad); err == nil {
			t.Errorf("NormalizePrefix(%q) accepted", bad)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"3.4.23": true, "3.5.0": true, "3.10.1": true, "4.0.0": true, "3.3.27": false, "2.3.8": false, "": false, "x.y": false} {
		if got := versionAtLeast(v, MinVersion); got != want {
			t.Errorf("versionAtLeast(%q) = %v", v, got)
		}
	}
}

func TestEntryNames(t *testing.T) {
	name := entryName(0x694d8a5e2f01, 3)
	if name != "lock-694d8a5e2f01-3" {
		t.Fatalf("entryName: %q", name)
	}
	if l, ok := entryLease(name); !ok || l != 0x694d8a5e2f01 {
		t.Fatalf("entryLease(%q) = %x, %v", name, l, ok)
	}
	for _, bad := range []string{"run", "lock-", "lock-zz-1", "lock-0-1"} {
		if _, ok := entryLease(bad); ok {
			t.Errorf("entryLease(%q) found a lease", bad)
		}
	}
}

// The rules after a previous holder's lease is found gone.
func TestAfterLease(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	info := state.HolderInfo{SessionTimeoutMS: 10000, KillGraceMS: 2000}
	outlives := info.Outlives()
	grace := 2*time.Second + state.KillSlack
	// Observed at t0 with 6 s left (the answer arriving 10 ms later).
	obs := leaseObs{owner: "x", sent: t0, recv: t0.Add(10 * time.Millisecond), left: 6 * time.Second}
	for _, tc := range []struct {
		name     string
		s        state.Suspicion
		o        leaseObs
		stopping bool
		now      time.Time
		until    time.Time // zero: no suspicion
	}{
		{"gone before it could expire: revoked", state.Suspicion{}, obs, false, t0.Add(2 * time.Second), t0.Add(2 * time.Second).Add(outlives)},
		{"gone in the second rounding leaves open", state.Suspicion{}, obs, false, t0.Add(6500 * time.Millisecond), t0.Add(10*time.Millisecond + 7*time.Second + state.KillSlack)},
		{"gone after it could expire: expired, taken at once", state.Suspicion{}, obs, false, t0.Add(8 * time.Second), time.Time{}},
		{"expired after keys were deleted: the kill grace is left", state.Suspicion{Owner: "x", Until: t0.Add(time.Minute)}, obs, false, t0.Add(8 * time.Second), t0.Add(8 * time.Second).Add(grace)},
		{"never observed, held record: taken as expired", state.Suspicion{}, leaseObs{}, false, t0, time.Time{}},
		{"never observed, stopping record: the kill grace", state.Suspicion{}, leaseObs{}, true, t0, t0.Add(grace)},
		{"observed another: no evidence", state.Suspicion{}, leaseObs{owner: "y", sent: t0, recv: t0, left: time.Minute}, false, t0, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := afterLease(tc.s, tc.o, "x", info, info, tc.stopping, tc.now)
			if tc.until.IsZero() {
				if got.Owner != "" {
					t.Fatalf("suspicion %+v, want none", got)
				}
				return
			}
			if got.Owner != "x" || !got.Until.Equal(tc.until) {
				t.Fatalf("suspicion %+v, want x until %v", got, tc.until)
			}
		})
	}
}

func TestPollAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A live holder's lease (most of its TTL left): every third of ours.
	if got := (leaseObs{recv: t0, left: 9 * time.Second}).pollAt(3 * time.Second); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("pollAt = %v", got)
	}
	// A lease about to run out: just after it could have.
	if got := (leaseObs{recv: t0, left: time.Second}).pollAt(3 * time.Second); !got.Equal(t0.Add(2100 * time.Millisecond)) {
		t.Fatalf("pollAt = %v", got)
	}
}

func TestTooOldNamesTheVersion(t *testing.T) {
	err := tooOld("10.0.0.1:2379", "3.3.27")
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "version 3.3.27") || !strings.Contains(err.Error(), "3.4 or later") {
		t.Fatalf("tooOld: %v", err)
	}
}
