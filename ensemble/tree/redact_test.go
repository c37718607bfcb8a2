package tree

import (
	"bytes"
	"strings"
	"testing"
)

// TestRedactedSnapshot: a redacted snapshot reads back as the tree with
// every digest hash replaced by x and every session password by the one
// given; the data stays, and the hashes are not in its bytes.
func TestRedactedSnapshot(t *testing.T) {
	tr := populated(t, false)
	pw := func(id int64) []byte { return []byte{byte(id), 0xEE} }
	var full, red bytes.Buffer
	if err := tr.WriteSnapshot(&full); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteRedactedSnapshot(&red, pw); err != nil {
		t.Fatal(err)
	}
	hash := strings.TrimPrefix(aliceOnly[0].ID, "alice:")
	if !bytes.Contains(full.Bytes(), []byte(hash)) || bytes.Contains(red.Bytes(), []byte(hash)) {
		t.Fatalf("digest hash in the full snapshot %v, in the redacted one %v", bytes.Contains(full.Bytes(), []byte(hash)), bytes.Contains(red.Bytes(), []byte(hash)))
	}
	got, err := ReadSnapshot(&red)
	if err != nil {
		t.Fatal(err)
	}
	if got.RedactedDigests() == 0 || tr.RedactedDigests() != 0 {
		t.Errorf("redacted digests: %d in the redacted tree, %d in the original", got.RedactedDigests(), tr.RedactedDigests())
	}
	super := []Identity{{Scheme: schemeSuper}}
	acl, _, err := got.GetACL("/app/secret", super)
	if err != nil || acl[0].ID != "alice:x" {
		t.Errorf("redacted ACL of /app/secret: %+v %v", acl, err)
	}
	if _, _, err := got.Get("/app/secret", aliceAuth); err != ErrNoAuth {
		t.Errorf("alice's identity on the redacted ACL: %v, want NOAUTH", err)
	}
	for _, s := range tr.Sessions() {
		r, ok := got.Session(s.ID)
		if !ok || !bytes.Equal(r.Password, pw(s.ID)) || r.Timeout != s.Timeout {
			t.Errorf("session %d: %+v %v", s.ID, r, ok)
		}
	}
	data, _, err := got.Get("/app", nil)
	if err != nil || string(data) != "v2" || got.NodeCount() != tr.NodeCount() {
		t.Errorf("redacted tree: /app %q %v, %d nodes, want %d", data, err, got.NodeCount(), tr.NodeCount())
	}
}
