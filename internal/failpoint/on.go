//go:build failpoint

package failpoint

import (
	"fmt"
	"os"
	"strings"
)

// Enabled says whether this binary was built with failpoints.
const Enabled = true

// Check returns the error armed for the failpoint name, or nil.
func Check(name string) error {
	if f := os.Getenv("COORDRUN_FAILPOINTS_FILE"); f != "" {
		// A missing file arms nothing: tests disarm by removing it.
		if b, err := os.ReadFile(f); err == nil {
			if err := lookup(string(b), name); err != nil {
				return err
			}
		}
	}
	return lookup(os.Getenv("COORDRUN_FAILPOINTS"), name)
}

func lookup(spec, name string) error {
	for _, line := range strings.FieldsFunc(spec, func(r rune) bool { return r == '\n' || r == ';' }) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || k != name {
			continue
		}
		if e, ok := errnos[v]; ok {
			return e
		}
		return fmt.Errorf("failpoint %s: unknown error %q", name, v)
	}
	return nil
}
