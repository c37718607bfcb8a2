package recipe

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/supervisor/state"
)

func TestSeqOf(t *testing.T) {
	for _, c := range []struct {
		name string
		want int64
	}{
		{"lock-0123abcd-0000000007", 7},
		{"lock-0123abcd-0000000000", 0},
		{"lock-x-y-0000000042", 42},           // the id may hold dashes: the sequence is after the last
		{"lock-bench0gate-0000000001", 1},     // a gate named like a contender
		{"lock-0123abcd-2147483648", 1 << 31}, // past int32: ZooKeeper's counter is a signed int
		{"run", -1},
		{"lock-", -1},
		{"lock-abc", -1},
		{"lock-abc-", -1},
		{"lock-abc-12x", -1},
		{"other-abc-0000000001", -1},
		{"", -1},
	} {
		if got := seqOf(c.name); got != c.want {
			t.Errorf("seqOf(%q) = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSortQueue(t *testing.T) {
	for _, c := range []struct {
		kids, want []string
	}{
		{nil, []string{}},
		{[]string{"run"}, []string{}},
		{
			// Sequence numbers decide, not the random ids.
			kids: []string{"lock-ffff-0000000003", "run", "lock-0000-0000000010", "lock-aaaa-0000000001"},
			want: []string{"lock-aaaa-0000000001", "lock-ffff-0000000003", "lock-0000-0000000010"},
		},
		{
			// Not queue nodes: dropped.
			kids: []string{"lock-b-0000000002", "stray", "lock-a-xx", "lock-c-0000000001"},
			want: []string{"lock-c-0000000001", "lock-b-0000000002"},
		},
	} {
		in := slices.Clone(c.kids)
		got := sortQueue(c.kids)
		if !slices.Equal(got, c.want) {
			t.Errorf("sortQueue(%q) = %q, want %q", in, got, c.want)
		}
		if !slices.Equal(c.kids, in) {
			t.Errorf("sortQueue changed its input: %q, was %q", c.kids, in)
		}
	}
}

func TestOutlives(t *testing.T) {
	for _, c := range []struct {
		info Info
		want time.Duration
	}{
		{Info{}, state.KillSlack},
		{Info{SessionTimeoutMS: 10000, KillGraceMS: 2500}, 12500*time.Millisecond + state.KillSlack},
		{Info{SessionTimeoutMS: 4000}, 4000*time.Millisecond + state.KillSlack},
	} {
		if got := c.info.Outlives(); got != c.want {
			t.Errorf("%+v.outlives() = %v, want %v", c.info, got, c.want)
		}
	}
}

func TestEvidence(t *testing.T) {
	q := []string{"lock-b-0000000002", "lock-c-0000000003"}
	// The run node's owner, as the head of the queue finds it taken.
	for _, c := range []struct {
		run    string
		orphan bool
	}{
		{"lock-b-0000000002", false}, // the head itself: from a take whose reply was lost
		{"lock-c-0000000003", false}, // queued behind: not the head's to judge
		{"lock-a-0000000001", true},  // its queue node deleted while it holds
	} {
		if got := orphanedRun(c.run, q); got != c.orphan {
			t.Errorf("orphanedRun(%s) = %v, want %v", c.run, got, c.orphan)
		}
	}
	// The record, as a waiter finds no run node at all.
	for _, c := range []struct {
		record string
		want   bool
	}{
		{"held lock-b-0000000002", true},      // the head took it, and its run node is gone
		{"released lock-b-0000000002", false}, // the head held before and released
		{"released lock-a-0000000001", false}, // the head is about to take
		{"held lock-a-0000000001", false},     // the previous holder's session ended
		{"", false},                           // never held
	} {
		if got := headWithoutRun(c.record, q[0]); got != c.want {
			t.Errorf("headWithoutRun(%q, %s) = %v, want %v", c.record, q[0], got, c.want)
		}
	}
}

func TestStoppingOf(t *testing.T) {
	for _, c := range []struct {
		record, node string
		ok           bool
	}{
		{"stopping lock-a-0000000001", "lock-a-0000000001", true},
		{stoppingRecord("lock-b-2"), "lock-b-2", true},
		{"held lock-a-0000000001", "", false},
		{"released lock-a-0000000001", "", false},
		{"", "", false},
		{"stopping", "", false},
	} {
		node, ok := stoppingOf(c.record)
		if ok != c.ok || ok && node != c.node {
			t.Errorf("stoppingOf(%q) = %q %v, want %q %v", c.record, node, ok, c.node, c.ok)
		}
	}
}

func TestACLNotation(t *testing.T) {
	for _, c := range []struct {
		in, formatted string
		open          bool
	}{
		{"world:anyone:cdrwa", "world:anyone:cdrwa", true},
		{"world:anyone:all", "world:anyone:cdrwa", true},
		{"digest:ops:abc=:cdrwa,world:anyone:r", "digest:ops:abc=:cdrwa,world:anyone:r", false},
		{"world:anyone:d", "world:anyone:d", true},
		{"world:anyone:ra", "world:anyone:ra", false},
		{"ip:10.0.0.0/8:cr", "ip:10.0.0.0/8:cr", false},
	} {
		acl, err := ParseACL(c.in)
		if err != nil {
			t.Errorf("ParseACL(%q): %v", c.in, err)
			continue
		}
		if got := FormatACL(acl); got != c.formatted {
			t.Errorf("FormatACL(ParseACL(%q)) = %q, want %q", c.in, got, c.formatted)
		}
		if got := OpenToAll(acl); got != c.open {
			t.Errorf("OpenToAll(%q) = %v, want %v", c.in, got, c.open)
		}
	}
	// A comma ends an entry, so an x509 DN with commas cannot be written
	// here: "x509:CN=a" has no perms.
	for _, bad := range []string{"", ",", "world", "world:anyone:q", "world:anyone:", ":x:r", "digest::r", "x509:CN=a,O=b:rw"} {
		if acl, err := ParseACL(bad); err == nil {
			t.Errorf("ParseACL(%q) = %v, want an error", bad, acl)
		}
	}
	if got := FormatACL([]wire.ACL{{Perms: wire.PermRead | wire.PermAdmin, ID: wire.ID{Scheme: "auth"}}}); got != "auth::ra" {
		t.Errorf("FormatACL(auth) = %q", got)
	}
}

func TestAccessErrorText(t *testing.T) {
	e := &AccessError{Path: "/coordrun/locks", Err: wire.ErrNoAuth}
	if got := e.Error(); !strings.Contains(got, "(ACL unreadable) as an unauthenticated session") {
		t.Errorf("AccessError without ACL or identity: %q", got)
	}
	e.ACL = []wire.ACL{{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:x="}}}
	e.Identity = []string{"ip:127.0.0.1", "digest:eve"}
	want := "no permission to join /coordrun/locks (ACL digest:ops:x=:cdrwa) as ip:127.0.0.1, digest:eve: " + wire.ErrNoAuth.Error()
	if got := e.Error(); got != want {
		t.Errorf("AccessError = %q, want %q", got, want)
	}
}

// A candidate's name always carries its id, unlike a queue node of an
// older supervisor, so a bare "c-<seq>" is somebody else's node.
func TestCandidateSeq(t *testing.T) {
	for _, c := range []struct {
		name string
		want int64
	}{
		{"c-0123abcd-0000000007", 7},
		{"c-x-y-0000000042", 42},
		{"c-0000000005", -1},
		{"c-", -1},
		{"c-ab-", -1},
		{"lock-ab-0000000001", -1},
		{"", -1},
	} {
		if got := candidateSeq(c.name); got != c.want {
			t.Errorf("candidateSeq(%q) = %d, want %d", c.name, got, c.want)
		}
	}
	if got := sortCandidates([]string{"c-b-0000000009", "lock-a-0000000001", "c-a-0000000002", "c-0000000001"}); !slices.Equal(got, []string{"c-a-0000000002", "c-b-0000000009"}) {
		t.Errorf("sortCandidates = %q", got)
	}
}
