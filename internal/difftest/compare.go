package difftest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// Tester runs sequences on a reference target (Apache ZooKeeper) and a
// target under test (coordrun) and compares their traces. Its methods run
// one sequence at a time; the counter keeps roots unique.
type Tester struct {
	Ref, Test Target
	Sessions  int
	Known     []Known // differences to accept; nil means the package's table

	next atomic.Int64
}

// Diff is the first place where two traces part: the op it happened in
// (-1: setup) and what each target showed from there on, as lines.
type Diff struct {
	Ops       []Op
	At        int
	Ref, Test string
}

// Finding is a sequence on which the targets differ.
type Finding struct {
	Diff
	RefTrace, TestTrace *Trace
	Known               *Known // the table entry that explains it, if any
}

// Check runs seq on both targets under a fresh root each and returns a
// finding, or nil when the traces agree. An error means a target could
// not be used at all.
func (t *Tester) Check(seq []Op) (*Finding, error) {
	// Distinct roots, so that both targets may be one server (as in the
	// tests that check the tester itself); traces name the root {R}.
	n := t.next.Add(1)
	a, err := run(t.Ref, fmt.Sprintf("/dt-%dr", n), t.Sessions, seq)
	if err != nil {
		return nil, err
	}
	b, err := run(t.Test, fmt.Sprintf("/dt-%dt", n), t.Sessions, seq)
	if err != nil {
		return nil, err
	}
	d, same := compare(seq, a, b)
	if same {
		return nil, nil
	}
	f := &Finding{Diff: d, RefTrace: a, TestTrace: b}
	f.Known = t.known(d)
	return f, nil
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

// compare finds the first differing line. The lines of the op where the
// traces part are reported whole on both sides, which reads better than
// a lone line.
func compare(seq []Op, a, b *Trace) (Diff, bool) {
	n := min(len(a.Lines), len(b.Lines))
	i := 0
	for i < n && a.Lines[i].Text == b.Lines[i].Text {
		i++
	}
	if i == len(a.Lines) && i == len(b.Lines) {
		return Diff{}, true
	}
	at := -1
	if i < len(a.Lines) {
		at = a.Lines[i].Op
	} else {
		at = b.Lines[i].Op
	}
	return Diff{Ops: seq, At: at, Ref: opLines(a, at), Test: opLines(b, at)}, false
}

func opLines(t *Trace, op int) string {
	var out []string
	for _, l := range t.Lines {
		if l.Op == op {
			out = append(out, l.Text)
		}
	}
	return strings.Join(out, "\n")
}

// Shrink cuts f's sequence down while the targets still differ in a way
// no known entry explains: first chunks, halving their size, then single
// ops (delta debugging, without the complement step). Every attempt is a
// full run on both targets under a fresh root. The ops after the
// difference are dropped up front, since nothing after it can cause it.
func (t *Tester) Shrink(f *Finding) (*Finding, error) {
	best := f
	if f.At >= 0 && f.At+1 < len(f.Ops) {
		g, err := t.Check(f.Ops[:f.At+1])
		if err != nil {
			return nil, err
		}
		if g != nil && g.Known == nil {
			best = g
		}
	}
	for chunk := len(best.Ops) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i < len(best.Ops); {
			cand := append(append([]Op(nil), best.Ops[:i]...), best.Ops[min(i+chunk, len(best.Ops)):]...)
			if len(cand) == 0 {
				i += chunk
				continue
			}
			g, err := t.Check(cand)
			if err != nil {
				return nil, err
			}
			if g != nil && g.Known == nil {
				best = g
				continue // the same i now names the next chunk
			}
			i += chunk
		}
	}
	return best, nil
}

// Report is a finding printed for a reader: the sequence, where it parts,
// and what each target showed there.
func (f *Finding) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops (after setup: %d sessions, an empty root {R}); the traces part at op #%d\n",
		len(f.Ops), countSessions(f.RefTrace), f.At)
	b.WriteString(Format(f.Ops))
	fmt.Fprintf(&b, "--- %s\n%s\n--- %s\n%s\n", f.RefTrace.Target, f.Ref, f.TestTrace.Target, f.Test)
	if f.Known != nil {
		fmt.Fprintf(&b, "known difference %s: %s\n", f.Known.ID, f.Known.Note)
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

// Write saves the report and both full traces in dir and returns the
// file's path.
func (f *Finding) Write(dir, name string) (string, error) {
	p := filepath.Join(dir, name+".txt")
	var b strings.Builder
	b.WriteString(f.Report())
	fmt.Fprintf(&b, "\n=== full trace: %s\n%s\n=== full trace: %s\n%s", f.RefTrace.Target, f.RefTrace, f.TestTrace.Target, f.TestTrace)
	return p, os.WriteFile(p, []byte(b.String()), 0o644)
}
