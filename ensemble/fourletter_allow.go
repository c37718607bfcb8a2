package ensemble

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// Which four-letter words the client port answers (Config.FourLetterWords),
// as ZooKeeper's 4lw.commands.whitelist. Most of them tell anyone who can
// reach the port something about the others: stat lists every client's
// address, wchc and wchp session ids with the paths they watch (lock
// paths), envi the user and working directory, conf the data dir, and srst
// resets the statistics. So by default only what health checks and
// `coordrun ensemble status` read is on: ZooKeeper 3.8's default srvr, and
// ruok, isro and coordrun's mbrs. The admin socket answers every word, and
// ruok is answered whatever the list (fourLetterAllowed).
//
// snap (and snpf) are not four-letter words for this list: they need an
// administrator whatever it says (adminid.go).

// defaultFourLetterWords is the list of an unset Config.FourLetterWords.
var defaultFourLetterWords = []string{"srvr", "ruok", "isro", statusWord}

// fourLetterWords are every word the member knows: ZooKeeper's that it
// answers, then coordrun's own.
var fourLetterWords = []string{"ruok", "isro", "srvr", "stat", "mntr", "conf", "srst", "envi", "wchs", "wchp", "wchc", statusWord}

// parseFourLetterWords checks a word list and returns it in its canonical
// form: the default for an empty one, ["*"] for one that holds "*".
func parseFourLetterWords(list []string) ([]string, error) {
	var out []string
	for _, w := range list {
		w = strings.TrimSpace(w)
		switch {
		case w == "":
			continue
		case w == "*":
			return []string{"*"}, nil
		case !slices.Contains(fourLetterWords, w):
			return nil, fmt.Errorf("four-letter word %q is unknown; known: %s, or * for all", w, strings.Join(fourLetterWords, ","))
		}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return slices.Clone(defaultFourLetterWords), nil
	}
	return out, nil
}

// fourLetterAllowed reports whether word may be answered on nc. ruok
// always is: it tells nothing but "imok", and the member's own liveness
// check (/healthz, the systemd watchdog) asks it on the client port, so a
// list without it would get a healthy member restarted.
func (m *Member) fourLetterAllowed(word string, nc net.Conn) bool {
	if _, ok := nc.(*adminConn); ok || word == "ruok" {
		return true
	}
	allowed := m.cfg.FourLetterWords
	return slices.Contains(allowed, "*") || slices.Contains(allowed, word)
}

// notWhitelisted is ZooKeeper 3.8's answer to a word left off the list.
func notWhitelisted(word string) string {
	return word + " is not executed because it is not in the whitelist.\n"
}
