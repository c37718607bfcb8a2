package supervisor

import (
	"os"
	"strings"
)

// What a job inherits. A job is often someone else's script, and what it
// prints (cron keeps its output with the firing's record) or passes on to
// its own children is out of coordrun's hands: so coordrun's credentials
// stop here, whichever way they came in. The variables that configure
// coordrun itself (COORDRUN_SERVERS, COORDRUN_ROOT, ...) are not secrets
// and stay, so that a job can run coordrun commands of its own.

// JobEnv is environ without the variables that carry coordrun's
// credentials; nil environ means this process's environment. The result
// is never nil, since exec reads a nil environment as "inherit".
func JobEnv(environ []string) []string {
	if environ == nil {
		environ = os.Environ()
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !secretEnv(name) {
			out = append(out, kv)
		}
	}
	return out
}

// secretEnv reports whether the variable name carries a credential of
// coordrun's: COORDRUN_AUTH (the --auth flag), and any COORDRUN_ variable
// named for a secret, a password or a passphrase, so that a flag added
// later for one is covered without a list to keep.
func secretEnv(name string) bool {
	rest, ok := strings.CutPrefix(name, "COORDRUN_")
	if !ok {
		return false
	}
	if rest == "AUTH" {
		return true
	}
	for _, w := range []string{"SECRET", "PASSWORD", "PASSPHRASE"} {
		if strings.Contains(rest, w) {
			return true
		}
	}
	return false
}
