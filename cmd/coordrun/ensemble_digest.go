package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/coordrun/coordrun/ensemble/zk"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newEnsembleSuperDigestCommand prints a super digest for the member's
// super-digest setting. The password is read from the terminal without
// echo, or from stdin, never from the command line, where ps and the
// shell's history would keep it.
func newEnsembleSuperDigestCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "super-digest USER",
		Short: "Print the super-digest setting for USER, reading the password from the terminal or stdin",
		Long: `Print the value of a member's super-digest setting for USER:
USER:BASE64(SHA1(USER:PASSWORD)), as ZooKeeper's superDigest. The password
is read from the terminal (not echoed) or, when stdin is not a terminal,
as its first line. Put the result in the member's config file, as
"super-digest: ...", and keep that file 0600: the digest is an unsalted
SHA-1, open to offline guessing. A client that then authenticates as
USER:PASSWORD (--auth, or addauth digest in zkCli.sh) is the super user.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := args[0]
			if user == "" || strings.Contains(user, ":") {
				return usageError{fmt.Errorf("user %q: want a name without a colon", user)}
			}
			pw, err := readPassword(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if pw == "" {
				return usageError{errors.New("empty password")}
			}
			fmt.Fprintln(cmd.OutOrStdout(), zk.DigestID(user+":"+pw))
			return nil
		},
	}
}

// readPassword reads a password: from the terminal without echo when in is
// one, else in's first line.
func readPassword(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		return string(b), err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
