package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "coordrun %s\n", version)
			if bi, ok := debug.ReadBuildInfo(); ok {
				fmt.Fprintf(out, "go %s\n", bi.GoVersion)
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" || s.Key == "vcs.time" || s.Key == "vcs.modified" {
						fmt.Fprintf(out, "%s %s\n", s.Key, s.Value)
					}
				}
			}
			return nil
		},
	}
}
