package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Values from the environment and the config file are held to the flags'
// own syntax: viper would take COORDRUN_TIMEOUT=2 or session-timeout: 10
// as nanoseconds, and COORDRUN_TRY=yes as false, without a word.

// notConfigured are the flags no variable or config key sets: cobra's
// own (COORDRUN_VERSION may well name a version), and --config, which
// COORDRUN_CONFIG sets as a path before any file is read.
var notConfigured = map[string]bool{"help": true, "version": true, "config": true}

// envName is the variable that sets flag name (loadConfig's rule).
func envName(name string) string {
	return "COORDRUN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// checkEnvValues refuses a COORDRUN_* variable of a duration, boolean or
// number flag that the flag itself would refuse. A flag given on the
// command line wins, so its variable is not read.
func checkEnvValues(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || notConfigured[f.Name] {
			return
		}
		name := envName(f.Name)
		val, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if why := badScalar(f.Value.Type(), val); why != "" {
			err = usageError{fmt.Errorf("%s=%q: %s", name, val, why)}
		}
	})
	return err
}

// checkFileValues does the same for the keys of a config file, whose
// YAML types say more: an unquoted 10 is a number, where a duration
// wants its unit.
func checkFileValues(file string, cmd *cobra.Command) error {
	fv := viper.New()
	fv.SetConfigFile(file)
	if fv.ReadInConfig() != nil {
		return nil // loadConfig has read it already and said why not
	}
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || notConfigured[f.Name] || !fv.InConfig(f.Name) {
			return
		}
		raw := fv.Get(f.Name)
		why := ""
		switch x := raw.(type) {
		case string:
			why = badScalar(f.Value.Type(), x)
		case bool:
			if f.Value.Type() != "bool" {
				why = "a boolean where a " + f.Value.Type() + " belongs"
			}
		case int, int64, uint64, float64:
			switch f.Value.Type() {
			case "duration":
				why = fmt.Sprintf("a duration needs its unit: write %vs (or ms, m, h)", x)
			case "bool":
				why = "want true or false"
			}
		}
		if why != "" {
			err = usageError{fmt.Errorf("config file %s: %s: %v: %s", file, f.Name, raw, why)}
		}
	})
	return err
}

// badScalar says why s is not a value of a flag of type typ, or "" when
// it is (or when typ is not checked here).
func badScalar(typ, s string) string {
	switch typ {
	case "duration":
		if _, err := time.ParseDuration(s); err != nil {
			if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
				return fmt.Sprintf("a duration needs its unit: write %ss (or ms, m, h)", s)
			}
			return "want a duration with its unit, as 10s, 500ms or 1m30s"
		}
	case "bool":
		if _, err := strconv.ParseBool(s); err != nil {
			return "want true or false (1 and 0 also do)"
		}
	case "int", "int32", "int64":
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return "want a whole number"
		}
	case "uint", "uint32", "uint64":
		if _, err := strconv.ParseUint(s, 10, 64); err != nil {
			return "want a whole number, 0 or more"
		}
	case "float32", "float64":
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return "want a number"
		}
	}
	return ""
}
