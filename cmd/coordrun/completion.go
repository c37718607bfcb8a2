package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// completionTimeout bounds the ensemble lookup behind a TAB: a shell
// waits on it, so an unreachable ensemble costs this, then no names.
const completionTimeout = 2 * time.Second

// addCompletions completes lock and cron job names from the ensemble
// (the children of the command's --root, found with its own --servers,
// credentials and TLS flags) and the fixed values of enumerated flags.
func addCompletions(root *cobra.Command) {
	names := map[string]int{ // command path: how many names it takes (-1 any)
		"coordrun status":        -1,
		"coordrun lock rm":       -1,
		"coordrun cron history":  1,
		"coordrun cron trigger":  1,
		"coordrun cron pause":    1,
		"coordrun cron resume":   1,
		"coordrun cron backfill": 1,
	}
	values := map[string][]string{
		"log-format":     {"text", "json"},
		"record-command": {"name", "full"},
		"log-level":      {"debug", "info", "warn", "error"},
		"overlap":        {"skip", "queue", "replace"},
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if n, ok := names[c.CommandPath()]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeChildren(n)
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if vals, ok := values[f.Name]; ok {
				_ = c.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp))
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeChildren completes up to max names (-1: any number) from the
// children of the command's --root.
func completeChildren(max int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if max >= 0 && len(args) >= max {
			return nil, none
		}
		v, err := loadConfig(cmd)
		if err != nil {
			return nil, none
		}
		servers, tlsCfg, err := serverFlags(v)
		if err != nil {
			return nil, none
		}
		auth, err := authFlag(v)
		if err != nil {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		c, err := client.Connect(ctx, client.Config{Servers: servers, SessionTimeout: 10 * time.Second, TLS: tlsCfg, Auth: auth})
		if err != nil {
			return nil, none
		}
		defer c.Close()
		kids, _, err := c.Children(ctx, v.GetString("root"))
		if err != nil {
			return nil, none
		}
		var out []cobra.Completion
		for _, k := range kids {
			if strings.HasPrefix(k, toComplete) && !slices.Contains(args, k) {
				out = append(out, k)
			}
		}
		return out, none
	}
}
