package difftest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
)

// Tester runs sequences on a reference target (Apache ZooKeeper) and a
// target under test (coordrun) and compares their traces. Its methods run
// one sequence at a time.
type Tester struct {
	Ref, Test Target
	Sessions  int
	Known     []Known // differences to accept; nil means the package's table
}

// roots numbers the roots of every run in the process, so testers that
// share a server never meet.
var roots atomic.Int64

// Diff is an op whose observations differ: its index At (-1: setup) in
// Ops, and what each target showed during it.
type Diff struct {
	Ops       []Op
	At        int
	Ref, Test string
	// Local means neither target changed state in the op (every reply is
	// an error, or it ran on a throwaway session), so the comparison goes
	// on past it. Any other difference ends the comparison: what follows
	// would differ as a consequence.
	Local bool
	Known *Known // the table entry that explains it, if any

	ref, test *Trace // for matchers that look at earlier ops' outcomes
}

// Finding is a sequence on which the targets differ, with the
// differences in op order; only the last may be non-local.
type Finding struct {
	Ops                 []Op
	Diffs               []Diff
	RefTrace, TestTrace *Trace
}

// Unknown is the differences the known table does not explain.
func (f *Finding) Unknown() []Diff {
	var out []Diff
	for _, d := range f.Diffs {
		if d.Known == nil {
			out = append(out, d)
		}
	}
	return out
}

// Check runs seq on both targets under a fresh root each and returns a
// finding, or nil when the traces agree. An error means a target could
// not be used at all.
func (t *Tester) Check(seq []Op) (*Finding, error) {
	// Distinct roots, so that both targets may be one server (as in the
	// tests that check the tester itself); traces name the root {R}.
	n := roots.Add(1)
	a, err := run(t.Ref, fmt.Sprintf("/dt-%dr", n), t.Sessions, seq)
	if err != nil {
		return nil, err
	}
	b, err := run(t.Test, fmt.Sprintf("/dt-%dt", n), t.Sessions, seq)
	if err != nil {
		return nil, err
	}
	diffs := compare(seq, a, b)
	if len(diffs) == 0 {
		return nil, nil
	}
	for i := range diffs {
		diffs[i].Known = t.known(diffs[i])
	}
	return &Finding{Ops: seq, Diffs: diffs, RefTrace: a, TestTrace: b}, nil
}

func (t *Tester) known(d Diff) *Known {
	table := t.Known
	if table == nil {
		table = KnownDifferences
	}
	for i := range table {
		if table[i].Match(d) {
			return &table[i]
		}
	}
	return nil
}

// compare compares the traces op by op, up to the first difference that
// is not local.
func compare(seq []Op, a, b *Trace) []Diff {
	ra, rb := blocks(a, len(seq)), blocks(b, len(seq))
	var diffs []Diff
	for op := -1; op < len(seq); op++ {
		x, y := ra[op+1], rb[op+1]
		if x == y {
			continue
		}
		d := Diff{Ops: seq, At: op, Ref: x, Test: y, Local: op >= 0 && local(x) && local(y), ref: a, test: b}
		diffs = append(diffs, d)
		if !d.Local {
			break
		}
	}
	return diffs
}

// blocks joins each op's lines (setup first).
func blocks(t *Trace, n int) []string {
	out := make([][]string, n+1)
	for _, l := range t.Lines {
		out[l.Op+1] = append(out[l.Op+1], l.Text)
	}
	s := make([]string, n+1)
	for i := range out {
		s[i] = strings.Join(out[i], "\n")
	}
	return s
}

// local reports whether an op's lines show no change of state: no reply
// says OK, no event arrived and no session's connection broke, or the op
// ran on a throwaway session and did not succeed there.
func local(block string) bool {
	for _, l := range strings.Split(block, "\n")[1:] {
		switch {
		case strings.HasPrefix(l, "  scratch -> "):
			if strings.HasPrefix(l, "  scratch -> OK") {
				return false
			}
		case strings.Contains(l, " event ") || strings.Contains(l, " barrier "):
			return false
		case strings.Contains(l, " -> OK") || strings.Contains(l, " -> connection closed") || strings.Contains(l, " -> no reply"):
			return false
		}
	}
	return true
}

var (
	digits    = regexp.MustCompile(`[0-9]+`)
	zxidOrder = regexp.MustCompile(`\((<|>z[0-9]+)\)`)
)

// Signature names a difference by its op's kind and the first line in
// which the two sides part, numbers left out, so that the same
// difference met in other sequences (or while shrinking) is recognised.
func (d Diff) Signature() string {
	o, _ := d.op()
	x, y := strings.Split(d.Ref, "\n"), strings.Split(d.Test, "\n")
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	a, b := "(nothing)", "(nothing)"
	if i < len(x) {
		a = x[i]
	}
	if i < len(y) {
		b = y[i]
	}
	a, b = firstDifferentResult(a, b)
	// Where a zxid falls among earlier ones depends on what else the
	// sequence read, which shrinking changes; the signature leaves it out.
	line := func(l string) string {
		return strings.TrimSpace(digits.ReplaceAllString(zxidOrder.ReplaceAllString(l, ""), "#"))
	}
	kind := opName(o.Code)
	if o.Raw != nil {
		kind += " (raw)"
	}
	return fmt.Sprintf("%s | %s | %s", kind, line(a), line(b))
}

// firstDifferentResult narrows two multi replies ("... [r1; r2; ...]") to
// their first differing results, so that one difference inside multis of
// different lengths and neighbours has one signature.
func firstDifferentResult(a, b string) (string, string) {
	ha, ra, oka := strings.Cut(a, " [")
	hb, rb, okb := strings.Cut(b, " [")
	if !oka || !okb || ha != hb {
		return a, b
	}
	xa, xb := strings.Split(strings.TrimSuffix(ra, "]"), "; "), strings.Split(strings.TrimSuffix(rb, "]"), "; ")
	for i := 0; i < len(xa) && i < len(xb); i++ {
		if xa[i] != xb[i] {
			return ha + " [.. " + xa[i] + " ..]", hb + " [.. " + xb[i] + " ..]"
		}
	}
	return a, b
}

// ErrNotRecurring is Shrink's answer for a difference that did not show
// again when its sequence was re-run.
var ErrNotRecurring = errors.New("the difference did not recur on re-runs")

// Shrink cuts seq down while the targets still show an unexplained
// difference with signature sig: first chunks, halving their size, then
// single ops (delta debugging without the complement step). Every attempt
// is a full run on both targets under a fresh root. Holding to one
// signature keeps the shrink from sliding to another difference.
func (t *Tester) Shrink(seq []Op, sig string) (*Finding, *Diff, error) {
	try := func(cand []Op) (*Finding, *Diff, error) {
		f, err := t.Check(cand)
		if err != nil || f == nil {
			return nil, nil, err
		}
		for _, d := range f.Unknown() {
			if d.Signature() == sig {
				return f, &d, nil
			}
		}
		return nil, nil, nil
	}
	// A difference that shows only sometimes cannot be shrunk; a few
	// tries tell it from one that shows every time.
	var best *Finding
	var bd *Diff
	for try1 := 0; try1 < 3 && best == nil; try1++ {
		var err error
		if best, bd, err = try(seq); err != nil {
			return nil, nil, err
		}
	}
	if best == nil {
		return nil, nil, ErrNotRecurring
	}
	// Nothing after the op that differs can cause it.
	if bd.At+1 < len(best.Ops) {
		if f, d, err := try(best.Ops[:bd.At+1]); err != nil {
			return nil, nil, err
		} else if f != nil {
			best, bd = f, d
		}
	}
	for chunk := len(best.Ops) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i < len(best.Ops); {
			cand := append(append([]Op(nil), best.Ops[:i]...), best.Ops[min(i+chunk, len(best.Ops)):]...)
			if len(cand) == 0 {
				i += chunk
				continue
			}
			f, d, err := try(cand)
			if err != nil {
				return nil, nil, err
			}
			if f != nil {
				best, bd = f, d
				continue // the same i now names the next chunk
			}
			i += chunk
		}
	}
	return best, bd, nil
}

// Report prints difference d of f for a reader: the sequence, where the
// traces part, and what each target showed there.
func (f *Finding) Report(d *Diff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops (after setup: %d sessions, an empty root {R}); they differ at op #%d\n",
		len(f.Ops), countSessions(f.RefTrace), d.At)
	b.WriteString(Format(f.Ops))
	fmt.Fprintf(&b, "--- %s\n%s\n--- %s\n%s\n", f.RefTrace.Target, d.Ref, f.TestTrace.Target, d.Test)
	if d.Known != nil {
		fmt.Fprintf(&b, "known difference %s: %s\n", d.Known.ID, d.Known.Note)
	}
	return b.String()
}

func countSessions(t *Trace) int {
	n := 0
	for _, l := range t.Lines {
		if l.Op == -1 && strings.HasPrefix(l.Text, "setup s") {
			n++
		}
	}
	return n
}

// Write saves the report of d and both full traces in dir and returns
// the file's path.
func (f *Finding) Write(d *Diff, dir, name string) (string, error) {
	p := filepath.Join(dir, name+".txt")
	var b strings.Builder
	b.WriteString(f.Report(d))
	fmt.Fprintf(&b, "\n=== full trace: %s\n%s\n=== full trace: %s\n%s", f.RefTrace.Target, f.RefTrace, f.TestTrace.Target, f.TestTrace)
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}
