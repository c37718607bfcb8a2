package difftest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
)

// The four-letter words side by side: ZooKeeper 3.8's answer and
// coordrun's, parsed into lines of key and value, must have the same
// syntax, ZooKeeper's keys in its order, each value of the same format
// (integer, decimal, hex zxid, version, ...), the fixed values equal and
// the final newline alike. Exporters and checks that scrape ZooKeeper
// read them by position or by key, so this is what keeps them working
// against coordrun. The values themselves differ and are not compared.

// flwWords are the words compared.
var flwWords = []string{"ruok", "isro", "srvr", "stat", "mntr", "conf", "envi"}

// flwAllowance is a ZooKeeper key coordrun may lack, and why.
type flwAllowance struct {
	word string
	key  *regexp.Regexp
	why  string
}

// flwAllowed are the differences explained: ZooKeeper's keys that
// coordrun's answer does not carry.
var flwAllowed = []flwAllowance{
	{"mntr", regexp.MustCompile(`_per_namespace$`),
		"one summary per top-level znode read, written or under quota; coordrun keeps no per-namespace figures"},
	{"mntr", regexp.MustCompile(`^zk_[a-z0-9]+_\d+_ack_latency$`),
		"ZooKeeper's leader samples each member's ack latency every thousandth proposal; coordrun does not time acks per member"},
	{"conf", regexp.MustCompile(`^(tickTime|initLimit|syncLimit)$`),
		"coordrun has no ticks: raft's heartbeat and election timeouts govern its members"},
	{"conf", regexp.MustCompile(`^electionAlg$`),
		"coordrun elects with raft, none of ZooKeeper's election algorithms"},
	{"envi", regexp.MustCompile(`^java\.`),
		"coordrun is not a JVM; go.version stands where java.version is"},
}

// flwFixed are the keys whose value must be ZooKeeper's own.
var flwFixed = map[string]bool{
	"ruok:":                true,
	"isro:":                true,
	"srvr:Mode":            true,
	"stat:Mode":            true,
	"mntr:zk_server_state": true,
	"mntr:zk_peer_state":   true,
	"conf:membership:":     true,
	"envi:Environment:":    true,
	"stat:Clients:":        true,
	"stat:" + flwBlank:     true,
}

// flwFormats name the format of values that one sample of ZooKeeper's
// cannot tell (a config version "0" is hex, a version is free text with
// a shape), by word and key pattern.
var flwFormats = []struct {
	word   string
	key    *regexp.Regexp
	format string
	value  *regexp.Regexp
}{
	{"", regexp.MustCompile(`^(Zookeeper version|zk_version|zookeeper\.version)$`), "version",
		regexp.MustCompile(`^3\.8\.\d+\S*, built on \d{4}-\d\d-\d\d \d\d:\d\d UTC$`)},
	{"stat", regexp.MustCompile(`^` + regexp.QuoteMeta(flwClient) + `$`), "client line",
		regexp.MustCompile(`^ /\S+\[\d+\]\(queued=\d+,recved=\d+,sent=\d+\)$`)},
	{"conf", regexp.MustCompile(`^version$`), "hex", regexp.MustCompile(`^[0-9a-f]+$`)},
	{"conf", regexp.MustCompile(`^server\.`), "server address",
		regexp.MustCompile(`^\S+:\d+:\d+:(participant|observer)(;\S+)?$`)},
	{"envi", regexp.MustCompile(`^os\.memory\.`), "megabytes", regexp.MustCompile(`^\d+MB$`)},
}

// Markers for the lines of stat's client block.
const (
	flwClient = "<client>"
	flwBlank  = "<blank>"
)

// flwLine is one line of an answer.
type flwLine struct{ key, value string }

// flwAnswer is a parsed answer.
type flwAnswer struct {
	lines   []flwLine
	newline bool // ends in "\n"
}

var (
	srvrLine = regexp.MustCompile(`^([A-Z][A-Za-z /]*): (.*)$`)
	// A key may hold a top-level znode's name (the per-namespace
	// summaries), and those can be almost anything but a tab.
	mntrLine = regexp.MustCompile(`^([^\t]+)\t(.*)$`)
	confLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.]*)=(.*)$`)
	// The members' ids in mntr's per-learner keys and conf's servers.
	learnerID = regexp.MustCompile(`^(zk_[a-z0-9]+_)[^_]+(_learner_handler_qp_)`)
	serverID  = regexp.MustCompile(`^server\.[^.=]+$`)
)

// parseFLW splits a word's answer into lines and names those that fit
// the word's syntax nowhere.
func parseFLW(word, text string) (flwAnswer, []string) {
	a := flwAnswer{newline: strings.HasSuffix(text, "\n")}
	body := strings.TrimSuffix(text, "\n")
	var bad []string
	switch word {
	case "ruok", "isro", "srst":
		a.lines = []flwLine{{"", body}}
		return a, nil
	}
	for i, l := range strings.Split(body, "\n") {
		key, value, ok := "", "", true
		switch word {
		case "srvr", "stat":
			switch {
			case l == "Clients:" && word == "stat":
				key = l
			case strings.HasPrefix(l, " /") && word == "stat":
				key, value = flwClient, l
			case l == "" && word == "stat":
				key = flwBlank
			default:
				m := srvrLine.FindStringSubmatch(l)
				ok = m != nil
				if ok {
					key, value = m[1], m[2]
				}
			}
		case "mntr":
			m := mntrLine.FindStringSubmatch(l)
			ok = m != nil
			if ok {
				key, value = learnerID.ReplaceAllString(m[1], "${1}<id>${2}"), m[2]
			}
		case "conf", "envi":
			switch {
			case word == "conf" && l == "membership: ":
				key = "membership:"
			case word == "envi" && i == 0:
				key, ok = l, l == "Environment:"
			default:
				m := confLine.FindStringSubmatch(l)
				ok = m != nil
				if ok {
					key, value = m[1], m[2]
					if word == "conf" && serverID.MatchString(key) {
						key = "server.<id>"
					}
				}
			}
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("line %d %q fits no %s line", i+1, l, word))
			continue
		}
		// stat's clients differ in number; the block is one entry.
		if key == flwClient && len(a.lines) > 0 && a.lines[len(a.lines)-1].key == flwClient {
			continue
		}
		a.lines = append(a.lines, flwLine{key, value})
	}
	return a, bad
}

var (
	intValue = regexp.MustCompile(`^-?\d+$`)
	decValue = regexp.MustCompile(`^-?\d+\.\d+(E-?\d+)?$`)
	hexValue = regexp.MustCompile(`^0x[0-9a-f]+$`)
)

// flwFormat names the format of a value: a named one if the word's key
// has it (with whether the value fits it), else integer, decimal, hex
// zxid, a slash-separated group of those, or text.
func flwFormat(word, key, value string) (string, bool) {
	for _, f := range flwFormats {
		if (f.word == "" || f.word == word) && f.key.MatchString(key) {
			return f.format, f.value.MatchString(value)
		}
	}
	number := func(v string) string {
		switch {
		case intValue.MatchString(v):
			return "integer"
		case decValue.MatchString(v):
			return "decimal"
		case hexValue.MatchString(v):
			return "hex zxid"
		}
		return ""
	}
	if f := number(value); f != "" {
		return f, true
	}
	if parts := strings.Split(value, "/"); len(parts) > 1 {
		var fs []string
		for _, p := range parts {
			f := number(p)
			if f == "" {
				return "text", true
			}
			fs = append(fs, f)
		}
		return strings.Join(fs, "/"), true
	}
	return "text", true
}

// compareFLW lists how coordrun's answer to word (got) departs from
// ZooKeeper's (ref), and the allowances it used.
func compareFLW(word, ref, got string) (problems []string, used []flwAllowance) {
	ra, bad := parseFLW(word, ref)
	for _, b := range bad {
		problems = append(problems, "ZooKeeper's own answer: "+b)
	}
	ga, bad := parseFLW(word, got)
	problems = append(problems, bad...)
	if ra.newline != ga.newline {
		problems = append(problems, fmt.Sprintf("ends in a newline: ZooKeeper %v, coordrun %v", ra.newline, ga.newline))
	}

	var want []flwLine
next:
	for _, l := range ra.lines {
		for _, al := range flwAllowed {
			if al.word == word && al.key.MatchString(l.key) {
				if !slices.ContainsFunc(used, func(u flwAllowance) bool { return u.key == al.key }) {
					used = append(used, al)
				}
				continue next
			}
		}
		want = append(want, l)
	}
	have := map[string]bool{}
	for _, l := range ga.lines {
		have[l.key] = true
	}
	wanted := map[string]bool{}
	for _, l := range want {
		wanted[l.key] = true
		if !have[l.key] {
			problems = append(problems, fmt.Sprintf("key %q missing", l.key))
		}
	}

	// The keys both have, in each one's order; and each value's format,
	// pairing the n-th occurrence of a key with its n-th.
	var refOrder, gotOrder []string
	seen := map[string]int{}
	refValues := map[string][]string{}
	for _, l := range want {
		if have[l.key] {
			refOrder = append(refOrder, l.key)
			refValues[l.key] = append(refValues[l.key], l.value)
		}
	}
	for _, l := range ga.lines {
		if !wanted[l.key] {
			// coordrun's own keys: mntr's are scraped as metrics, so
			// they must be numbers.
			if f, _ := flwFormat(word, l.key, l.value); word == "mntr" && f != "integer" && f != "decimal" {
				problems = append(problems, fmt.Sprintf("coordrun's own key %q has %s value %q, not a number", l.key, f, l.value))
			}
			continue
		}
		gotOrder = append(gotOrder, l.key)
		n := seen[l.key]
		seen[l.key]++
		if n >= len(refValues[l.key]) {
			continue
		}
		rv := refValues[l.key][n]
		if flwFixed[word+":"+l.key] {
			if rv != l.value {
				problems = append(problems, fmt.Sprintf("key %q: value %q, ZooKeeper's is %q", l.key, l.value, rv))
			}
			continue
		}
		rf, rok := flwFormat(word, l.key, rv)
		gf, gok := flwFormat(word, l.key, l.value)
		switch {
		case !rok:
			problems = append(problems, fmt.Sprintf("key %q: ZooKeeper's value %q is no %s", l.key, rv, rf))
		case !gok:
			problems = append(problems, fmt.Sprintf("key %q: value %q is no %s (ZooKeeper's: %q)", l.key, l.value, gf, rv))
		case rf != gf:
			problems = append(problems, fmt.Sprintf("key %q: value %q is %s, ZooKeeper's %q is %s", l.key, l.value, gf, rv, rf))
		}
	}
	if !slices.Equal(refOrder, gotOrder) {
		for i := range min(len(refOrder), len(gotOrder)) {
			if refOrder[i] != gotOrder[i] {
				problems = append(problems, fmt.Sprintf("order: key %d is %q, ZooKeeper has %q there", i+1, gotOrder[i], refOrder[i]))
				break
			}
		}
		if len(refOrder) != len(gotOrder) {
			problems = append(problems, fmt.Sprintf("order: %d keys in common, %d in ZooKeeper's order", len(gotOrder), len(refOrder)))
		}
	}
	return problems, used
}

func fourLetter(t *testing.T, addr, word string) string {
	t.Helper()
	out, err := client.FourLetter(testkit.Context(t, 10*time.Second), addr, word, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", word, addr, err)
	}
	return out
}

// openSession keeps a session with one answered request on addr until
// the test ends, so that stat lists an established client.
func openSession(t *testing.T, addr string) {
	t.Helper()
	s, err := dial(addr, 10000)
	if err != nil {
		t.Fatalf("session on %s: %v", addr, err)
	}
	t.Cleanup(s.close)
	if _, _, err := s.call(s.nextXid(), wire.OpGetData, &wire.PathWatchRequest{Path: "/"}, nil); err != nil {
		t.Fatalf("getData on %s: %v", addr, err)
	}
}

// compareWords fetches every word from both servers and fails on each
// unexplained difference.
func compareWords(t *testing.T, role, zk, cr string) {
	t.Helper()
	openSession(t, zk)
	openSession(t, cr)
	for _, w := range flwWords {
		ref, got := fourLetter(t, zk, w), fourLetter(t, cr, w)
		problems, used := compareFLW(w, ref, got)
		for _, p := range problems {
			t.Errorf("%s %s: %s", role, w, p)
		}
		if len(problems) > 0 {
			t.Logf("%s %s, ZooKeeper's:\n%s\ncoordrun's:\n%s", role, w, ref, got)
		}
		for _, u := range used {
			t.Logf("%s %s: allowed, keys like %s: %s", role, w, u.key, u.why)
		}
	}
}

// srvrMode is the Mode line of addr's srvr, "" while it is not serving.
func srvrMode(t *testing.T, addr string) string {
	out, err := client.FourLetter(testkit.Context(t, 5*time.Second), addr, "srvr", nil)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "Mode: "); ok {
			return m
		}
	}
	return ""
}

// leaderAndFollower waits until every member serves, and returns the
// leader's address and a follower's.
func leaderAndFollower(t *testing.T, addrs []string) (leader, follower string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "every member serving, one of them leading", func() bool {
		leader, follower = "", ""
		for _, a := range addrs {
			switch srvrMode(t, a) {
			case "leader":
				leader = a
			case "follower":
				follower = a
			default:
				return false
			}
		}
		return leader != "" && follower != ""
	})
	return leader, follower
}

// TestFourLetterWordsLikeZooKeeper compares a standalone ZooKeeper's
// words with a single coordrun member's, and the fixed answers: srst's,
// and that of a word coordrun does not answer (ZooKeeper's for a word not
// in its whitelist).
func TestFourLetterWordsLikeZooKeeper(t *testing.T) {
	zk, cr := startZooKeeper(t), startCoordrun(t, 1)[0]
	compareWords(t, "standalone", zk, cr)
	if ref, got := fourLetter(t, zk, "srst"), fourLetter(t, cr, "srst"); got != ref {
		t.Errorf("srst: %q, ZooKeeper says %q", got, ref)
	}
	const unanswered = "cons is not executed because it is not in the whitelist.\n"
	if got := fourLetter(t, cr, "cons"); got != unanswered {
		t.Errorf("cons: %q, want ZooKeeper's answer for a word not whitelisted, %q", got, unanswered)
	}
}

// TestFourLetterWordsLikeZooKeeperQuorum compares the leaders and a
// follower each of a 3-member ZooKeeper and a 3-member coordrun.
func TestFourLetterWordsLikeZooKeeperQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three ZooKeeper servers")
	}
	zks, crs := startZooKeeperQuorum(t), startCoordrun(t, 3)
	zl, zf := leaderAndFollower(t, zks)
	cl, cf := leaderAndFollower(t, crs)
	compareWords(t, "leader", zl, cl)
	compareWords(t, "follower", zf, cf)
}

// ZooKeeper 3.8's answers as a standalone server gave them, shortened,
// for TestFourLetterCheckerBites.
const (
	zkSrvrSample = "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\n" +
		"Latency min/avg/max: 1/4.1818/16\nReceived: 25\nSent: 26\nConnections: 2\nOutstanding: 0\n" +
		"Zxid: 0x5\nMode: standalone\nNode count: 8\n"
	zkStatSample = "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nClients:\n" +
		" /127.0.0.1:58102[1](queued=0,recved=11,sent=11)\n /127.0.0.1:58116[0](queued=0,recved=1,sent=0)\n\n" +
		"Latency min/avg/max: 1/4.1818/16\nReceived: 25\nSent: 26\nConnections: 2\nOutstanding: 0\n" +
		"Zxid: 0x5\nMode: standalone\nNode count: 8\n"
	zkMntrSample = "zk_version\t3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\n" +
		"zk_server_state\tstandalone\nzk_ephemerals_count\t0\nzk_num_alive_connections\t1\n" +
		"zk_avg_latency\t0.0\nzk_outstanding_requests\t0\nzk_znode_count\t5\n" +
		"zk_avg_d1_read_per_namespace\t0.0\nzk_min_d1_read_per_namespace\t0\n"
	zkConfSample = "clientPort=32193\nsecureClientPort=-1\ndataDir=/tmp/q3/data/version-2\ndataDirSize=597\n" +
		"tickTime=200\nserverId=3\nelectionPort=32383\nquorumPort=32283\npeerType=0\nmembership: \n" +
		"server.1=127.0.0.1:32281:32381:participant\nserver.2=127.0.0.1:32282:32382:participant\n" +
		"server.3=127.0.0.1:32283:32383:participant\nversion=0"
)

// TestFourLetterCheckerBites shows that the comparison notices a missing
// key, a value in another format, a changed fixed value, keys out of
// order, a line of the wrong syntax and a lost final newline, and lets
// the allowed differences pass.
func TestFourLetterCheckerBites(t *testing.T) {
	for _, c := range []struct {
		name, word, ref, got string
		want                 string // in one problem; "" for none
	}{
		{"srvr unchanged", "srvr", zkSrvrSample, zkSrvrSample, ""},
		{"stat unchanged", "stat", zkStatSample, zkStatSample, ""},
		{"stat, one client", "stat", zkStatSample,
			strings.Replace(zkStatSample, " /127.0.0.1:58102[1](queued=0,recved=11,sent=11)\n", "", 1), ""},
		{"stat, no client", "stat", zkStatSample,
			strings.Replace(zkStatSample, " /127.0.0.1:58102[1](queued=0,recved=11,sent=11)\n /127.0.0.1:58116[0](queued=0,recved=1,sent=0)\n", "", 1),
			`key "<client>" missing`},
		{"mntr unchanged", "mntr", zkMntrSample, zkMntrSample, ""},
		{"mntr without the allowed per-namespace keys", "mntr", zkMntrSample,
			strings.Split(zkMntrSample, "zk_avg_d1")[0], ""},
		{"conf unchanged", "conf", zkConfSample, zkConfSample, ""},
		{"conf without the allowed tickTime", "conf", zkConfSample, strings.Replace(zkConfSample, "tickTime=200\n", "", 1), ""},
		{"a key removed", "mntr", zkMntrSample, strings.Replace(zkMntrSample, "zk_znode_count\t5\n", "", 1),
			`key "zk_znode_count" missing`},
		{"a decimal as an integer", "mntr", zkMntrSample, strings.Replace(zkMntrSample, "zk_avg_latency\t0.0", "zk_avg_latency\t0", 1),
			`key "zk_avg_latency": value "0" is integer, ZooKeeper's "0.0" is decimal`},
		{"average latency as an integer", "srvr", zkSrvrSample, strings.Replace(zkSrvrSample, "1/4.1818/16", "1/4/16", 1),
			`is integer/integer/integer, ZooKeeper's "1/4.1818/16" is integer/decimal/integer`},
		{"zxid in decimal", "srvr", zkSrvrSample, strings.Replace(zkSrvrSample, "Zxid: 0x5", "Zxid: 5", 1),
			`key "Zxid": value "5" is integer`},
		{"another mode", "srvr", zkSrvrSample, strings.Replace(zkSrvrSample, "Mode: standalone", "Mode: leader", 1),
			`key "Mode": value "leader", ZooKeeper's is "standalone"`},
		{"a version clients cannot parse", "mntr", zkMntrSample, strings.Replace(zkMntrSample, "3.8.0-", "coordrun-", 1),
			`key "zk_version": value "coordrun-`},
		{"keys swapped", "srvr", zkSrvrSample, strings.Replace(zkSrvrSample, "Received: 25\nSent: 26\n", "Sent: 26\nReceived: 25\n", 1),
			`order: key 3 is "Sent", ZooKeeper has "Received" there`},
		{"a line of no syntax", "mntr", zkMntrSample, zkMntrSample + "zk_extra 1\n", `fits no mntr line`},
		{"a line of no syntax, at the start", "srvr", zkSrvrSample, "Zookeeper version 3.8.4\n" + zkSrvrSample[strings.Index(zkSrvrSample, "\n")+1:], `fits no srvr line`},
		{"an own key that is no number", "mntr", zkMntrSample, zkMntrSample + "coordrun_role\tleader\n", `not a number`},
		{"no final newline", "srvr", zkSrvrSample, strings.TrimSuffix(zkSrvrSample, "\n"), "ends in a newline"},
		{"a server line of another syntax", "conf", zkConfSample,
			strings.Replace(zkConfSample, "server.2=127.0.0.1:32282:32382:participant", "server.2=127.0.0.1:32282:participant", 1),
			`value "127.0.0.1:32282:participant" is no server address`},
		{"the wrong answer to ruok", "ruok", "imok", "imok\n", "ends in a newline"},
	} {
		problems, _ := compareFLW(c.word, c.ref, c.got)
		switch {
		case c.want == "" && len(problems) > 0:
			t.Errorf("%s: want no problem, got %q", c.name, problems)
		case c.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }):
			t.Errorf("%s: want a problem with %q, got %q", c.name, c.want, problems)
		}
	}
}
