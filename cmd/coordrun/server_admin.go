package main

import (
	"log/slog"
	"os"
)

// warnReadableSecret warns when the config file a secret came from can be
// read by others than its owner: a super digest is an unsalted SHA-1,
// open to offline guessing by whoever reads it.
func warnReadableSecret(log *slog.Logger, file string, inFile bool) {
	if !inFile || file == "" {
		return
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	log.Warn("the config file holds super-digest but others may read it; chmod 600 it", "file", file, "mode", fi.Mode().Perm().String())
}
