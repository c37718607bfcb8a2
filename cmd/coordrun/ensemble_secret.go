package main

import (
	"fmt"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/spf13/cobra"
)

func newEnsembleSecretCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "secret",
		Short: "Print a new ensemble secret for --peer-secret-file",
		Long: `Print a new random ensemble secret (32 bytes, base64). Every member of an
ensemble reads the same secret from --peer-secret-file (config key
peer-secret-file); it authenticates members to each other, and a process
without it cannot talk to the peer port. Keep it like a password:

  umask 077; coordrun ensemble secret > /etc/coordrun/peer-secret

then copy that file to every member, mode 0600, owned by the user the
member runs as.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := ensemble.NewPeerSecret()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), s)
			return err
		},
	}
}
