package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// holders: in a jobs file sets the job's semaphore; a bad count, or one
// above 1 with overlap replace, is refused with the key's meaning.
func TestJobsFileHolders(t *testing.T) {
	load := func(extra string) (int, error) {
		p := filepath.Join(t.TempDir(), "jobs.yaml")
		body := "jobs:\n  - name: reindex\n    schedule: \"@every 1h\"\n    command: /bin/true\n" + extra
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		jobs, err := loadJobsFile(p)
		if err != nil {
			return 0, err
		}
		return jobs[0].Holders, nil
	}
	if n, err := load("    holders: 3\n"); err != nil || n != 3 {
		t.Errorf("holders: 3 gave %d, %v", n, err)
	}
	if n, err := load(""); err != nil || n != 0 {
		t.Errorf("no holders: gave %d, %v (want 0: one at a time)", n, err)
	}
	for extra, want := range map[string]string{
		"    holders: -1\n":                      "holders -1",
		"    holders: 1000\n":                    "holders 1000",
		"    holders: 2\n    overlap: replace\n": "overlap replace",
		"    holders: two\n":                     "line 5",
	} {
		if _, err := load(extra); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", extra, err, want)
		}
	}
}
