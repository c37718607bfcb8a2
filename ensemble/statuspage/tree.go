package statuspage

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NodeView is one znode in the tree browser: what an unauthenticated
// client may see of it.
type NodeView struct {
	Path   string `json:"path"`
	Parent string `json:"parent,omitempty"` // "" for the root
	// Error says why the node is not shown at all (there is none).
	Error string `json:"error,omitempty"`
	// Stat and EphemeralOwner are shown whatever the ACL, as exists
	// shows them to any client.
	Stat           *Stat  `json:"stat,omitempty"`
	EphemeralOwner string `json:"ephemeralOwner,omitempty"`
	// Children, sorted, at most childrenShown of ChildrenCount.
	Children      []string `json:"children"`
	ChildrenCount int      `json:"children_count"`
	// Data as bytes (base64 in JSON); Text when it is printable UTF-8,
	// JSON when it parses as JSON (indented); Hex a dump of its first
	// hexShown bytes. DataError says why there is none (the ACL).
	Data      []byte `json:"data"`
	Text      string `json:"text,omitempty"`
	JSON      string `json:"json,omitempty"`
	Hex       string `json:"hex,omitempty"`
	DataError string `json:"data_error,omitempty"`
	ACL       []ACL  `json:"acl"`
	ACLError  string `json:"acl_error,omitempty"`
}

const (
	childrenShown = 1000
	hexShown      = 4 << 10
	// maxPath bounds a path parameter, far above any real znode path.
	maxPath = 4096
)

// errBadPath marks a path parameter that cannot name a znode.
var errBadPath = errors.New("bad znode path")

// checkPath validates a znode path given as a parameter: absolute, no
// empty, "." or ".." components, no trailing slash but on the root, no
// control characters.
func checkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", errBadPath)
	case len(p) > maxPath:
		return fmt.Errorf("%w: longer than %d bytes", errBadPath, maxPath)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: not UTF-8", errBadPath)
	case p[0] != '/':
		return fmt.Errorf("%w %q: must start with /", errBadPath, p)
	case p == "/":
		return nil
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("%w %q: must not end with /", errBadPath, p)
	}
	for _, part := range strings.Split(p[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%w %q: empty, . or .. component", errBadPath, p)
		}
	}
	for _, r := range p {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0xfffd {
			return fmt.Errorf("%w %q: control character", errBadPath, p)
		}
	}
	return nil
}

// checkName validates a lock or job name: one znode name.
func checkName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsRune(s, '/') || len(s) > 1024 {
		return fmt.Errorf("bad name %q: one znode name", s)
	}
	return checkPath("/" + s)
}

func parentOf(p string) string {
	if p == "/" {
		return ""
	}
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/"
	}
	return p[:i]
}

// readNode reads p (a checked path) inside a tree view.
func readNode(t Tree, p string) NodeView {
	v := NodeView{Path: p, Parent: parentOf(p), Children: []string{}, ACL: []ACL{}}
	st, err := t.Exists(p)
	if err != nil {
		v.Error = nodeError(err)
		return v
	}
	v.Stat, v.EphemeralOwner = &st, sessionHex(st.EphemeralOwner)
	if data, _, err := t.Get(p); err != nil {
		v.DataError = nodeError(err)
	} else {
		v.Data = data
	}
	if kids, st, err := t.FirstChildren(p, childrenShown, nil); err == nil {
		v.ChildrenCount = int(st.NumChildren)
		v.Children = append(v.Children, kids...)
	}
	if acl, err := t.ACL(p); err != nil {
		v.ACLError = nodeError(err)
	} else {
		v.ACL = append(v.ACL, acl...)
	}
	return v
}

// render fills in the data's readings; outside the tree view, since
// indenting JSON takes a while for a large node.
func (v *NodeView) render() {
	if v.Data == nil {
		return
	}
	if printable(v.Data) {
		v.Text = string(v.Data)
	}
	var buf bytes.Buffer
	if json.Valid(v.Data) && json.Indent(&buf, v.Data, "", "  ") == nil {
		v.JSON = buf.String()
	}
	d := v.Data
	if len(d) > hexShown {
		d = d[:hexShown]
	}
	v.Hex = hex.Dump(d)
}

// printable reports whether b reads as text: UTF-8 without control
// characters other than tab and newlines.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}
