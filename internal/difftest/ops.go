package difftest

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/coordrun/coordrun/ensemble/wire"
)

// Op is one request of a sequence. It is plain data, so a sequence can be
// replayed on any target and cut down while shrinking.
//
// Path is a template: {R} is the sequence's root (e.g. /dt-7), {N} the
// root's name without the slash (for paths outside the root, under
// /zookeeper), and {S} the last node a sequential create made in this
// run (the same name on both targets when they agree so far).
type Op struct {
	S       int   // session ordinal
	Code    int32 // opcode
	Path    string
	Data    Data
	Flags   int32
	Version int32
	Watch   bool
	ACL     string // a key of acls
	Mode    int32  // addWatch mode; watcher type of checkWatches/removeWatches
	Auth    string // scheme and credentials of an auth op: "digest u1:pw1"
	Sub     []Op   // the operations of multi and multiRead
	Raw     []byte // body bytes sent instead of an encoded request
	// Scratch runs the op on a throwaway session, because it may end
	// the connection (malformed input, oversized frames, failed auth);
	// the result then says whether the connection stayed open.
	Scratch bool
}

// Data is a request's data buffer; absent (null), empty and filled are
// different things on the wire.
type Data struct {
	Kind DataKind
	Text string
}

type DataKind int

const (
	DataNull DataKind = iota
	DataEmpty
	DataText
	DataBig // one byte over the default 1 MiB limit
)

func (d Data) bytes() []byte {
	switch d.Kind {
	case DataEmpty:
		return []byte{}
	case DataText:
		return []byte(d.Text)
	case DataBig:
		return make([]byte, wire.DefaultMaxData+1)
	}
	return nil
}

func (d Data) String() string {
	switch d.Kind {
	case DataEmpty:
		return "empty"
	case DataText:
		return fmt.Sprintf("%q", d.Text)
	case DataBig:
		return fmt.Sprintf("<%d bytes>", wire.DefaultMaxData+1)
	}
	return "null"
}

// digestID is the id of a digest ACL entry for user:password, as
// ZooKeeper's DigestAuthenticationProvider derives it.
func digestID(userPass string) string {
	user, _, _ := strings.Cut(userPass, ":")
	sum := sha1.Sum([]byte(userPass))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// acls are the ACL lists the generator picks from by name; the names keep
// printed sequences short. The bad ones are each invalid in one way.
var acls = map[string][]wire.ACL{
	"open":       {{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"read":       {{Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"noread":     {{Perms: wire.PermAll &^ wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"creator":    {{Perms: wire.PermAll, ID: wire.ID{Scheme: "auth", ID: ""}}},
	"u1":         {{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: digestID("u1:pw1")}}},
	"u1+read":    {{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: digestID("u1:pw1")}}, {Perms: wire.PermRead, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"ip":         {{Perms: wire.PermAll, ID: wire.ID{Scheme: "ip", ID: "127.0.0.1"}}},
	"read-admin": {{Perms: wire.PermRead | wire.PermAdmin, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"open-twice": {{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}, {Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "anyone"}}},
	"ip-other":   {{Perms: wire.PermAll, ID: wire.ID{Scheme: "ip", ID: "10.1.2.0/24"}}},
	"bad-empty":  {},
	"bad-null":   nil,
	"bad-scheme": {{Perms: wire.PermAll, ID: wire.ID{Scheme: "nosuch", ID: "x"}}},
	"bad-ip":     {{Perms: wire.PermAll, ID: wire.ID{Scheme: "ip", ID: "300.1.1.1"}}},
	"bad-digest": {{Perms: wire.PermAll, ID: wire.ID{Scheme: "digest", ID: "nocolon"}}},
	"bad-world":  {{Perms: wire.PermAll, ID: wire.ID{Scheme: "world", ID: "someone"}}},
}

var flagNames = map[int32]string{
	wire.FlagPersistent:           "persistent",
	wire.FlagEphemeral:            "ephemeral",
	wire.FlagPersistentSequential: "sequential",
	wire.FlagEphemeralSequential:  "ephemeral-sequential",
	wire.FlagContainer:            "container",
	wire.FlagPersistentWithTTL:    "ttl",
}

// String prints the op in a form meant for a reader of a reproduction.
func (o Op) String() string {
	var b strings.Builder
	if o.Scratch {
		b.WriteString("scratch ")
	} else {
		fmt.Fprintf(&b, "s%d ", o.S)
	}
	b.WriteString(opName(o.Code))
	o.args(&b)
	return b.String()
}

func opName(code int32) string {
	if n := wire.OpName(code); n != "unknown" {
		return n
	}
	return fmt.Sprintf("opcode(%d)", code)
}

func (o Op) args(b *strings.Builder) {
	if o.Raw != nil {
		fmt.Fprintf(b, " raw=%x", o.Raw)
		return
	}
	switch o.Code {
	case wire.OpCreate, wire.OpCreate2, wire.OpCreateContainer, wire.OpCreateTTL:
		fmt.Fprintf(b, " %q data=%v %s acl=%s", o.Path, o.Data, flagName(o.Flags), o.ACL)
	case wire.OpDelete, wire.OpCheck:
		fmt.Fprintf(b, " %q v=%d", o.Path, o.Version)
	case wire.OpSetData:
		fmt.Fprintf(b, " %q data=%v v=%d", o.Path, o.Data, o.Version)
	case wire.OpExists, wire.OpGetData, wire.OpGetChildren, wire.OpGetChildren2:
		fmt.Fprintf(b, " %q", o.Path)
		if o.Watch {
			b.WriteString(" watch")
		}
	case wire.OpSetACL:
		fmt.Fprintf(b, " %q acl=%s v=%d", o.Path, o.ACL, o.Version)
	case wire.OpAddWatch:
		mode := "persistent"
		if o.Mode == wire.AddWatchPersistentRecursive {
			mode = "recursive"
		} else if o.Mode != wire.AddWatchPersistent {
			mode = fmt.Sprintf("mode(%d)", o.Mode)
		}
		fmt.Fprintf(b, " %q %s", o.Path, mode)
	case wire.OpCheckWatches, wire.OpRemoveWatches:
		fmt.Fprintf(b, " %q type=%d", o.Path, o.Mode)
	case wire.OpAuth:
		fmt.Fprintf(b, " %s", o.Auth)
	case wire.OpMulti, wire.OpMultiRead:
		b.WriteString(" [")
		for i, s := range o.Sub {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(opName(s.Code))
			s.args(b)
		}
		b.WriteString("]")
	case wire.OpWhoAmI:
	default:
		if o.Path != "" {
			fmt.Fprintf(b, " %q", o.Path)
		}
	}
}

func flagName(f int32) string {
	if n, ok := flagNames[f]; ok {
		return n
	}
	return fmt.Sprintf("flags(%d)", f)
}

// Format prints a sequence one op per line, numbered as in traces.
func Format(seq []Op) string {
	var b strings.Builder
	for i, o := range seq {
		fmt.Fprintf(&b, "#%d %v\n", i, o)
	}
	return b.String()
}
