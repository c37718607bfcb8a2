package zkengine

import (
	"testing"

	"github.com/coordrun/coordrun/ensemble/client/recipe"
	"github.com/coordrun/coordrun/ensemble/wire"
)

// The ACL of what a session creates: its own identities with every
// permission, plus --acl; or --acl alone, when it names the creator or
// there are no identities.
func TestRecordACL(t *testing.T) {
	ops := wire.ACL{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "ops:h"}}
	parse := func(s string) []wire.ACL {
		acl, err := recipe.ParseACL(s)
		if err != nil {
			t.Fatal(err)
		}
		return acl
	}
	for _, tc := range []struct {
		own   []wire.ACL
		extra string
		want  string
	}{
		{[]wire.ACL{ops}, "", "digest:ops:h:cdrwa"},
		{[]wire.ACL{ops}, "world:anyone:r", "digest:ops:h:cdrwa,world:anyone:r"},
		{[]wire.ACL{ops}, "digest:ops:h:r,digest:viewer:v:r", "digest:ops:h:cdrwa,digest:viewer:v:r"},
		{[]wire.ACL{ops}, "auth::cdrwa,world:anyone:r", "auth::cdrwa,world:anyone:r"},
		{nil, "world:anyone:r", "world:anyone:r"},
	} {
		var extra []wire.ACL
		if tc.extra != "" {
			extra = parse(tc.extra)
		}
		if got := recipe.FormatACL(recordACL(tc.own, extra)); got != tc.want {
			t.Errorf("recordACL(%v, %q) = %q, want %q", tc.own, tc.extra, got, tc.want)
		}
	}
}
