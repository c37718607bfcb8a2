package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictCommands makes every mistake on the command line bad usage (64)
// with a suggestion where one is near: cobra returns plain errors for
// wrong argument counts and missing required flags (exit 1), and a group
// command (ensemble, cron) given an unknown subcommand prints its help and
// exits 0, which a script reads as success.
func strictCommands(root *cobra.Command) {
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		// cobra checks these after the pre-run hooks, as plain errors.
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return usageError{err}
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			return usageError{err}
		}
		return nil
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w%s", err, flagSuggestion(cmd, err.Error()))}
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2 // SuggestionsFor reads it unset as 0
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = cobra.ArbitraryArgs
			c.RunE = groupRunE
		}
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageError{fmt.Errorf("%s: %w (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// groupRunE runs a command that only groups others: alone it shows its
// help; with a word that names none of them it is bad usage.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	return usageError{fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), commandSuggestion(cmd, args[0]))}
}

// commandSuggestion is the "did you mean" of a mistyped subcommand of
// cmd, or "".
func commandSuggestion(cmd *cobra.Command, typed string) string {
	s := cmd.SuggestionsFor(typed)
	if len(s) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(s, " or ") + "?"
}

// flagSuggestion is the "did you mean" of an unknown flag in a pflag
// error ("unknown flag: --severs"), or "". cobra suggests commands only.
func flagSuggestion(cmd *cobra.Command, msg string) string {
	const prefix = "unknown flag: --"
	i := strings.Index(msg, prefix)
	if i < 0 {
		return ""
	}
	typed := strings.SplitN(msg[i+len(prefix):], "=", 2)[0]
	var near []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if levenshtein(typed, f.Name) <= 2 || (len(typed) >= 3 && strings.HasPrefix(f.Name, typed)) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	return "; did you mean " + strings.Join(near, " or ") + "?"
}

// levenshtein is the edit distance of two short words.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
