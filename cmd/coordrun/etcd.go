package main

// The etcd engine in the client plumbing: --servers etcd://host:port,...
// (also COORDRUN_SERVERS and servers: in the config file) runs the
// session on etcd instead of the ZooKeeper protocol; no scheme, or zk://,
// is the ZooKeeper protocol as before.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/coordrun/coordrun/supervisor"
	"github.com/coordrun/coordrun/supervisor/engine"
	"github.com/coordrun/coordrun/supervisor/engine/etcdengine"
)

// addEtcdFlags adds the flags only the etcd engine reads.
func addEtcdFlags(f *pflag.FlagSet) {
	f.String("prefix", etcdengine.DefaultPrefix, "with --servers etcd://...: the key prefix coordrun keeps its records under (its user needs readwrite on it)")
}

// useEtcd points o at etcd when --servers names etcd members: it checks
// the addresses, --prefix and --auth now (bad input is exit 64 before
// anything is dialled) and sets the dialer. Unless --root was given, the
// records go under the prefix (<prefix><sub>, sub "locks" or "cron").
func useEtcd(cmd *cobra.Command, v *viper.Viper, o *supervisor.ConnOptions, sub string) error {
	servers := v.GetString("servers")
	if !etcdengine.IsEtcd(servers) {
		return nil
	}
	cfg, err := etcdConfig(v)
	if err != nil {
		return err
	}
	cfg.SessionTimeout = o.SessionTimeout
	if !rootGiven(cmd, v) {
		v.Set("root", path.Join(cfg.Prefix, sub))
	}
	o.Dial = func(ctx context.Context, log *slog.Logger) (engine.Conn, error) {
		c := cfg
		c.Log = log
		return etcdengine.Dial(ctx, c)
	}
	return nil
}

// rootGiven reports whether --root was set (flag, config file or
// environment) rather than left at its default.
func rootGiven(cmd *cobra.Command, v *viper.Viper) bool {
	return cmd.Flags().Changed("root") || v.InConfig("root") || os.Getenv("COORDRUN_ROOT") != ""
}

// connectEtcd opens the short session of an inspecting command on etcd,
// checking only read access (pause and trigger write, and are refused by
// etcd if the user may not). Unless --root was given, it reads under the
// prefix: <prefix>locks or <prefix>cron, as the default root says.
func connectEtcd(ctx context.Context, cmd *cobra.Command, v *viper.Viper) (engine.Conn, error) {
	cfg, err := etcdConfig(v)
	if err != nil {
		return nil, err
	}
	cfg.ReadOnly, cfg.SessionTimeout = true, 10*time.Second
	if f := cmd.Flags().Lookup("root"); f != nil && !rootGiven(cmd, v) {
		v.Set("root", path.Join(cfg.Prefix, path.Base(f.DefValue)))
	}
	conn, err := etcdengine.Dial(ctx, cfg)
	var ce *etcdengine.ConfigError
	switch {
	case err == nil:
		return conn, nil
	case errors.As(err, &ce):
		return nil, usageError{err}
	case errors.Is(err, engine.ErrUnreachable):
		return nil, exitError{code: supervisor.ExitUnavailable, err: err}
	}
	return nil, err
}

// etcdConfig reads the etcd engine's settings from the flags.
func etcdConfig(v *viper.Viper) (etcdengine.Config, error) {
	eps, err := etcdengine.ParseServers(v.GetString("servers"))
	if err != nil {
		return etcdengine.Config{}, usageError{err}
	}
	prefix, err := etcdengine.NormalizePrefix(v.GetString("prefix"))
	if err != nil {
		return etcdengine.Config{}, usageError{err}
	}
	tc, err := clientTLS(v)
	if err != nil {
		return etcdengine.Config{}, err
	}
	cfg := etcdengine.Config{Endpoints: eps, TLS: tc, Prefix: prefix}
	switch auth := v.GetStringSlice("auth"); len(auth) {
	case 0:
	case 1:
		user, pass, ok := strings.Cut(auth[0], ":")
		if !ok || user == "" {
			return etcdengine.Config{}, usageError{fmt.Errorf("--auth %q: want user:password (etcd's user authentication)", auth[0])}
		}
		cfg.Username, cfg.Password = user, pass
	default:
		return etcdengine.Config{}, usageError{errors.New("--auth: etcd takes one user:password")}
	}
	if v.GetString("acl") != "" {
		return etcdengine.Config{}, usageError{errors.New("--acl is ZooKeeper's: on etcd, access is the user's roles on the key prefix (see docs/etcd.md)")}
	}
	return cfg, nil
}
