package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// defaultConfigFile is read when it exists and no --config is given.
const defaultConfigFile = "/etc/coordrun/coordrun.yaml"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "coordrun [flags] -- command [args...]",
		Short: "Run a job on exactly one host, coordinated through a ZooKeeper-compatible ensemble",
		Long: `coordrun runs a job on exactly one host at a time. Plain "coordrun -- cmd"
is "coordrun run -- cmd".

` + runLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			if cmd.ArgsLenAtDash() != 0 {
				return usageError{fmt.Errorf("unknown command %q%s (to run a job: coordrun -- %s)", args[0], commandSuggestion(cmd, args[0]), strings.Join(args, " "))}
			}
			return runRun(cmd, args)
		},
	}
	addRunFlags(root)
	root.SetVersionTemplate("coordrun {{.Version}}\n")
	root.PersistentFlags().String("config", "", "config file (default "+defaultConfigFile+" when present; env COORDRUN_CONFIG)")
	root.AddCommand(newServerCommand(), newEnsembleCommand(), newVersionCommand(), newRunCommand(), newWatchdogCommand(), newStatusCommand(), newCronCommand(), newFenceCommand())
	root.AddCommand(newDocsCommand()) // hidden: man pages and completions for packaging
	root.AddCommand(newStoreCheckCommand())
	root.AddCommand(newLockCommand())
	strictHelp(root)
	strictCommands(root)
	addCompletions(root)
	addExamples(root)
	return root
}

// strictHelp makes `coordrun help WORD` for a WORD that names no command
// bad usage with a suggestion, as `coordrun WORD` is: cobra's own help
// command prints the root's help for it and exits 0.
func strictHelp(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, help := range root.Commands() {
		if help.Name() != "help" || help.Run == nil {
			continue
		}
		show := help.Run
		help.Run = nil
		help.RunE = func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err == nil && target != nil && len(rest) > 0 {
				err = fmt.Errorf("unknown help topic %q for %q%s", rest[0], target.CommandPath(), commandSuggestion(target, rest[0]))
			}
			if err != nil {
				return usageError{err}
			}
			show(cmd, args)
			return nil
		}
	}
}

// loadConfig returns a viper instance for one command, resolving every key
// as flag > COORDRUN_* environment variable > config file > flag default.
// Keys are the long flag names; "client-addr" reads COORDRUN_CLIENT_ADDR.
func loadConfig(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("COORDRUN")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	var bindErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if notConfigured[f.Name] {
			return
		}
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	})
	if bindErr != nil {
		return nil, bindErr
	}
	if err := checkEnvValues(cmd); err != nil {
		return nil, err
	}
	file, _ := cmd.Flags().GetString("config")
	if file == "" {
		file = os.Getenv("COORDRUN_CONFIG")
	}
	explicit := file != ""
	if !explicit {
		if _, err := os.Stat(defaultConfigFile); err == nil {
			file = defaultConfigFile
		}
	}
	if file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			if !explicit && errors.Is(err, fs.ErrNotExist) {
				return v, nil
			}
			return nil, usageError{fmt.Errorf("config file %s: %w", file, err)}
		}
		if err := checkKnownKeys(v, cmd); err != nil {
			return nil, err
		}
		if err := checkFileValues(file, cmd); err != nil {
			return nil, err
		}
		if cmd.Flags().Lookup("auth") != nil && v.InConfig("auth") && fileHoldsAuth(file) {
			if err := checkSecretFile(file); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// fileHoldsAuth reports whether the config file itself gives credentials
// (auth: [] does not), whatever flags and environment say.
func fileHoldsAuth(file string) bool {
	fv := viper.New()
	fv.SetConfigFile(file)
	return fv.ReadInConfig() == nil && len(fv.GetStringSlice("auth")) > 0
}

// checkSecretFile refuses a config file that holds credentials (auth:)
// when users other than its owner may open it, as ssh refuses such a
// private key: the file is the documented place for them because, unlike
// --auth and COORDRUN_AUTH, nobody else sees it (ps, /proc/PID/environ,
// a job's environment).
func checkSecretFile(file string) error {
	fi, err := os.Stat(file)
	if err != nil {
		return usageError{fmt.Errorf("config file %s: %w", file, err)}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return usageError{fmt.Errorf("config file %s holds auth: credentials but its mode %04o lets other users read it: chmod 600 %s (owned by the user that runs coordrun), or move auth: to a file of its own given with --config", file, perm, file)}
	}
	return nil
}

// checkKnownKeys rejects config file keys that no coordrun command knows,
// so a typo does not silently leave a default in force. One file serves
// every role on a host, so a key of another command is fine.
func checkKnownKeys(v *viper.Viper, cmd *cobra.Command) error {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd.Root())
	for _, k := range v.AllKeys() {
		top := strings.SplitN(k, ".", 2)[0]
		if known[top] || sharedSections[top] {
			continue
		}
		return usageError{fmt.Errorf("config file %s: unknown key %q", v.ConfigFileUsed(), k)}
	}
	return nil
}

// sharedSections are top-level config keys that belong to commands other
// than the one running (one file configures every role on a host).
var sharedSections = map[string]bool{"jobs": true}
