package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// jobVariables are what coordrun run (and cron) adds to a job's
// environment.
var jobVariables = [][2]string{
	{"COORDRUN_FENCING_TOKEN", "set for the job: the lock node's czxid, rising with every new holder of the lock"},
	{"COORDRUN_LOCK", "set for the job: the lock's name"},
	{"COORDRUN_LOCK_NODE", "set for the job: the holder's znode"},
}

// manSections adds to cobra's man page of c what cobra does not write:
// EXIT STATUS (exitTable), ENVIRONMENT (the COORDRUN_* variable of each
// flag) and FILES, before SEE ALSO; and calls cobra's EXAMPLE section
// EXAMPLES, as man-pages(7) does.
func manSections(c *cobra.Command, page string) string {
	// man-pages(7) puts EXAMPLES after FILES: cut cobra's EXAMPLE out,
	// to be put back there.
	var ex string
	if i := strings.Index(page, "\n.SH EXAMPLE\n"); i >= 0 {
		end := strings.Index(page[i+1:], "\n.SH ")
		if end < 0 {
			end = len(page) - i - 1
		}
		ex = strings.Replace(page[i+1:i+1+end+1], ".SH EXAMPLE\n", ".SH EXAMPLES\n", 1)
		page = page[:i+1] + page[i+1+end+1:]
	}
	var b strings.Builder
	if rows := exitRowsFor(c.CommandPath()); rows != nil {
		b.WriteString(".SH EXIT STATUS\n")
		for _, r := range rows {
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s\n", roff(r.code), roff(r.meaning))
		}
	}
	var vars []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || f.Name == "config" {
			return
		}
		vars = append(vars, fmt.Sprintf(".TP\n\\fB%s\\fP\nas \\fB\\-\\-%s\\fP: %s\n", roff(envName(f.Name)), roff(f.Name), roff(f.Usage)))
	})
	sort.Strings(vars)
	b.WriteString(".SH ENVIRONMENT\n")
	b.WriteString(roff("Every flag can be given as a variable instead: COORDRUN_ and the flag's name in capitals, "+
		"dashes as underscores. A flag on the command line wins over its variable, a variable over the config file. "+
		"Values are held to the flags' syntax: a duration needs its unit (10s, 500ms), a boolean is true or false (1 or 0).") + "\n")
	fmt.Fprintf(&b, ".TP\n\\fBCOORDRUN_CONFIG\\fP\n%s\n", roff("the config file, as --config"))
	b.WriteString(strings.Join(vars, ""))
	if c.Flags().Lookup("kill-grace") != nil && c.Flags().Lookup("root") != nil {
		for _, v := range jobVariables {
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s\n", v[0], roff(v[1]))
		}
	}
	b.WriteString(".SH FILES\n")
	fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s\n", roff(defaultConfigFile), roff("the config file, read when it exists and neither --config nor COORDRUN_CONFIG names another: "+
		"YAML, its keys the long flag names (session-timeout: 10s). One file serves every command on a host; "+
		"a file holding auth: credentials must be readable by its owner alone (chmod 600)."))
	b.WriteString(ex)
	if i := strings.Index(page, "\n.SH SEE ALSO\n"); i >= 0 {
		return page[:i+1] + b.String() + page[i+1:]
	}
	return page + b.String()
}

// roff escapes text for a man page: backslashes and hyphens (which roff
// would take for its escapes and hyphenation points), and a leading dot
// or quote, which would start a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
