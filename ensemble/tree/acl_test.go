package tree

import (
	"errors"
	"slices"
	"testing"
)

// fixupCase is one ACL that fixupACL should fix up as want (nil:
// refuse with ErrInvalidACL) for a session with auth.
type fixupCase struct {
	name string
	acl  []ACL
	auth []Identity
	want []ACL
}

func checkFixups(t *testing.T, cases []fixupCase) {
	t.Helper()
	for _, c := range cases {
		got, err := fixupACL(c.acl, c.auth)
		if c.want == nil {
			if !errors.Is(err, ErrInvalidACL) {
				t.Errorf("%s: got %v, %v; want ErrInvalidACL", c.name, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestFixupACL(t *testing.T) {
	world := ACL{Perms: PermAll, Scheme: "world", ID: "anyone"}
	cases := []fixupCase{
		{"open", OpenACL, nil, OpenACL},
		{"empty", []ACL{}, nil, nil},
		{"nil", nil, nil, nil},
		{"duplicates dropped", []ACL{world, world}, nil, []ACL{world}},
		{"world other id", []ACL{{Perms: PermAll, Scheme: "world", ID: "someone"}}, nil, nil},
		{"unknown scheme", []ACL{{Perms: PermAll, Scheme: "sasl", ID: "bob"}}, nil, nil},
		{"super scheme", []ACL{{Perms: PermAll, Scheme: "super", ID: ""}}, nil, nil},
		{"empty scheme", []ACL{{Perms: PermAll}}, nil, nil},
		{"one bad entry spoils the list", []ACL{world, {Perms: 1, Scheme: "x", ID: "y"}}, nil, nil},

		{"digest", []ACL{{Perms: 1, Scheme: "digest", ID: "bob:hash"}}, nil, []ACL{{Perms: 1, Scheme: "digest", ID: "bob:hash"}}},
		{"digest no colon", []ACL{{Perms: 1, Scheme: "digest", ID: "bob"}}, nil, nil},
		{"digest empty hash", []ACL{{Perms: 1, Scheme: "digest", ID: "bob:"}}, nil, nil},
		{"digest trailing colon (Java split)", []ACL{{Perms: 1, Scheme: "digest", ID: "bob:h:"}}, nil, []ACL{{Perms: 1, Scheme: "digest", ID: "bob:h:"}}},
		{"digest empty user", []ACL{{Perms: 1, Scheme: "digest", ID: ":h"}}, nil, []ACL{{Perms: 1, Scheme: "digest", ID: ":h"}}},
		{"digest three parts", []ACL{{Perms: 1, Scheme: "digest", ID: "a:b:c"}}, nil, nil},

		{"ip", []ACL{{Perms: 1, Scheme: "ip", ID: "10.0.0.1"}}, nil, []ACL{{Perms: 1, Scheme: "ip", ID: "10.0.0.1"}}},
		{"ip cidr", []ACL{{Perms: 1, Scheme: "ip", ID: "10.0.0.0/8"}}, nil, []ACL{{Perms: 1, Scheme: "ip", ID: "10.0.0.0/8"}}},
		{"ip /0", []ACL{{Perms: 1, Scheme: "ip", ID: "0.0.0.0/0"}}, nil, []ACL{{Perms: 1, Scheme: "ip", ID: "0.0.0.0/0"}}},
		{"ip /32", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/32"}}, nil, []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/32"}}},
		{"ip /33", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/33"}}, nil, nil},
		{"ip negative bits", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/-1"}}, nil, nil},
		{"ip bits not a number", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/x"}}, nil, nil},
		{"ip three parts", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3"}}, nil, nil},
		{"ip five parts", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4.5"}}, nil, nil},
		{"ip trailing dot", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4."}}, nil, nil},
		{"ip part too big", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.256"}}, nil, nil},
		{"ip hostname", []ACL{{Perms: 1, Scheme: "ip", ID: "localhost"}}, nil, nil},
		{"ip empty", []ACL{{Perms: 1, Scheme: "ip", ID: ""}}, nil, nil},
		{"ipv6", []ACL{{Perms: 1, Scheme: "ip", ID: "fd00::/8"}}, nil, []ACL{{Perms: 1, Scheme: "ip", ID: "fd00::/8"}}},
		{"ipv6 /129", []ACL{{Perms: 1, Scheme: "ip", ID: "::1/129"}}, nil, nil},

		{"auth expands to digest identities", []ACL{{Perms: 3, Scheme: "auth", ID: "ignored"}}, []Identity{localhost, alice, bob, superID},
			[]ACL{{Perms: 3, Scheme: "digest", ID: alice.ID}, {Perms: 3, Scheme: "digest", ID: bob.ID}}},
		{"auth with ip only", []ACL{{Perms: 3, Scheme: "auth"}}, []Identity{localhost}, nil},
		{"auth with super only", []ACL{{Perms: 3, Scheme: "auth"}}, []Identity{superID}, nil},
		{"auth with nothing", []ACL{{Perms: 3, Scheme: "auth"}}, nil, nil},
		{"auth mixed with world", []ACL{{Perms: 1, Scheme: "world", ID: "anyone"}, {Perms: 31, Scheme: "auth"}}, []Identity{alice},
			[]ACL{{Perms: 1, Scheme: "world", ID: "anyone"}, {Perms: 31, Scheme: "digest", ID: alice.ID}}},
	}
	checkFixups(t, cases)
}

func TestPermitted(t *testing.T) {
	ip := func(id string) Identity { return Identity{Scheme: "ip", ID: id} }
	cases := []struct {
		name string
		acl  []ACL
		perm int32
		auth []Identity
		want bool
	}{
		{"world", OpenACL, PermWrite, nil, true},
		{"world lacks bit", []ACL{{Perms: PermRead, Scheme: "world", ID: "anyone"}}, PermWrite, nil, false},
		{"any of the bits", []ACL{{Perms: PermAdmin, Scheme: "world", ID: "anyone"}}, PermRead | PermAdmin, nil, true},
		{"empty ACL permits", nil, PermAll, nil, true},
		{"super", aliceOnly, PermAll, []Identity{superID}, true},
		{"digest match", aliceOnly, PermRead, []Identity{ip("1.1.1.1"), alice}, true},
		{"digest mismatch", aliceOnly, PermRead, []Identity{bob}, false},
		{"digest scheme must match", aliceOnly, PermRead, []Identity{{Scheme: "sasl", ID: alice.ID}}, false},
		{"ip exact", []ACL{{Perms: 1, Scheme: "ip", ID: "127.0.0.1"}}, 1, []Identity{ip("127.0.0.1")}, true},
		{"ip exact other", []ACL{{Perms: 1, Scheme: "ip", ID: "127.0.0.1"}}, 1, []Identity{ip("127.0.0.2")}, false},
		{"ip /24 in", []ACL{{Perms: 1, Scheme: "ip", ID: "10.1.2.0/24"}}, 1, []Identity{ip("10.1.2.200")}, true},
		{"ip /24 out", []ACL{{Perms: 1, Scheme: "ip", ID: "10.1.2.0/24"}}, 1, []Identity{ip("10.1.3.1")}, false},
		{"ip /20 in", []ACL{{Perms: 1, Scheme: "ip", ID: "10.1.16.0/20"}}, 1, []Identity{ip("10.1.31.255")}, true},
		{"ip /20 out", []ACL{{Perms: 1, Scheme: "ip", ID: "10.1.16.0/20"}}, 1, []Identity{ip("10.1.32.0")}, false},
		{"ip acl host bits ignored", []ACL{{Perms: 1, Scheme: "ip", ID: "10.1.2.99/24"}}, 1, []Identity{ip("10.1.2.3")}, true},
		{"ip /0", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/0"}}, 1, []Identity{ip("200.1.1.1")}, true},
		{"ip bad identity", []ACL{{Perms: 1, Scheme: "ip", ID: "1.2.3.4/0"}}, 1, []Identity{ip("host")}, false},
		{"ipv6", []ACL{{Perms: 1, Scheme: "ip", ID: "fd00::/8"}}, 1, []Identity{ip("fd12::1")}, true},
		{"ipv6 vs v4", []ACL{{Perms: 1, Scheme: "ip", ID: "::/0"}}, 1, []Identity{ip("1.2.3.4")}, false},
		{"no identities", aliceOnly, PermRead, nil, false},
	}
	for _, c := range cases {
		if got := permitted(c.acl, c.perm, c.auth); got != c.want {
			t.Errorf("%s: permitted = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseJavaInt(t *testing.T) {
	for s, want := range map[string]int{"0": 0, "+7": 7, "-0": 0, "010": 10, "2147483647": 2147483647, "-2147483648": -2147483648} {
		if got, ok := parseJavaInt(s); !ok || got != want {
			t.Errorf("parseJavaInt(%q) = %d, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "+", "-", "2147483648", "-2147483649", "1e3", " 1", "99999999999999999999"} {
		if _, ok := parseJavaInt(s); ok {
			t.Errorf("parseJavaInt(%q) accepted", s)
		}
	}
}
