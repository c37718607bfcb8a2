package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coordrun/coordrun/ensemble"
	"github.com/coordrun/coordrun/ensemble/statuspage"
	"github.com/spf13/cobra"
)

func newServerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run an ensemble member (a ZooKeeper-compatible coordination server)",
		Long: `Run one member of a coordrun ensemble. Members replicate a znode tree with
raft and serve ZooKeeper clients (zkCli.sh, kazoo, Curator, go-zookeeper)
on the client port.

Start 1, 3 or 5 members, each with its own --id and --data-dir, all with
the same --peers list. A member restarted on an existing data dir resumes
from it; --peers only matters the first time.

  coordrun server --dev
  coordrun ensemble secret > peer-secret; chmod 600 peer-secret  # once, copied to every member
  coordrun server --id 1 --data-dir /var/lib/coordrun \
      --client-addr :2181 --peer-addr 10.0.0.1:2888 \
      --peers 1=10.0.0.1:2888,2=10.0.0.2:2888,3=10.0.0.3:2888 \
      --peer-secret-file peer-secret`,
		Args: cobra.NoArgs,
		RunE: runServer,
	}
	f := cmd.Flags()
	f.String("id", "", "member id, unique in the ensemble")
	f.String("data-dir", "", "directory for the raft log and snapshots")
	f.String("client-addr", ":2181", "address ZooKeeper clients connect to")
	f.String("peer-addr", "", "address for raft and member traffic (host:port)")
	f.String("peers", "", "initial members as id=host:port,... (peer addresses, this member included)")
	f.Bool("peer-forwarded", false, "this member's --peers entry reaches --peer-addr through a proxy or port mapping: accept the two unlike (refused otherwise)")
	f.Bool("dev", false, "one throwaway member: temporary data dir, id 1, peer port on loopback")
	f.Bool("join", false, "start as a new member of a running ensemble: no bootstrap; add it with coordrun ensemble add")
	f.String("restore", "", "seed a new (empty) data dir from a backup made with coordrun ensemble snapshot save")
	f.StringSlice("admin-from", nil, "client networks (CIDR) besides loopback from which an administrator may change members and save snapshots over TCP (an address alone is never enough)")
	f.String("super-digest", "", "the super user as user:BASE64(SHA1(user:password)), as ZooKeeper's superDigest: a client that authenticates as it may change members and passes every ACL (put it in a 0600 config file as super-digest:, not on the command line)")
	f.StringSlice("super-x509", nil, "client certificate identities (as --tls-client-identity derives them) that are the super user; needs --tls-client-ca")
	f.String("admin-socket", "", "Unix socket serving the client protocol to the administrator (root and this member's uid): such a client is the super user (e.g. /run/coordrun/admin.sock)")
	f.IntSlice("admin-socket-uids", nil, "uids allowed on --admin-socket instead of root and this member's own")
	f.StringSlice("four-letter-words", nil, "four-letter words the client port answers, or * for all (default srvr,ruok,isro,mbrs; ruok always answers)")
	f.Duration("min-session-timeout", 4*time.Second, "smallest session timeout granted")
	f.Duration("max-session-timeout", 40*time.Second, "largest session timeout granted")
	f.Int("max-data-bytes", 1<<20, "largest znode data accepted")
	f.Bool("enforce-quota", false, "refuse creates and setData past a ZooKeeper hard quota (zkCli setquota -N/-B) with QUOTAEXCEEDED, as ZooKeeper's zookeeper.enforceQuota; off, as in ZooKeeper 3.8, the stats are kept but nothing is refused")
	f.Int("max-tree-nodes", 1_000_000, "znodes the tree may hold: writes that would create more are refused (QUOTAEXCEEDED) until znodes are deleted")
	f.String("max-tree-bytes", "1GiB", "bytes of paths and data the tree may hold, with a unit (e.g. 512MiB): writes that would grow it past this are refused (QUOTAEXCEEDED)")
	f.Int("max-client-conns", 60, "client connections open at once from one IP address (ZooKeeper's maxClientCnxns); 0: no cap")
	f.Duration("heartbeat-timeout", 300*time.Millisecond, "raft heartbeat timeout: a follower that hears nothing from the leader for about 1-2x this long starts an election")
	f.Duration("election-timeout", 300*time.Millisecond, "raft election timeout: how long a candidate waits for votes")
	f.Uint64("snapshot-threshold", 8192, "log entries between snapshots")
	f.Duration("snapshot-interval", 30*time.Second, "how often the member looks whether --snapshot-threshold entries have accumulated (with jitter)")
	f.Int("snapshot-retain", 2, "snapshots kept in the data dir (the newest and spares); older ones are deleted")
	f.Uint64("trailing-logs", 4096, "log entries kept behind a snapshot, so that a follower a little behind catches up without a whole snapshot")
	f.String("admin-addr", "", "address for the admin HTTP listener: /metrics, /healthz, /readyz and the status page at / (default off; e.g. 127.0.0.1:8080)")
	f.Bool("admin-pprof", false, "also serve Go's profiles under /debug/pprof/ on the admin listener")
	f.StringSlice("admin-allow", nil, "client networks (CIDR) or addresses besides loopback that the admin listener answers: metrics, health, pprof and the status page (e.g. a monitoring network)")
	f.StringSlice("admin-host", nil, "host names, besides IP addresses, localhost and --admin-addr's host, that requests to the admin listener may carry in Host (e.g. the name Prometheus scrapes)")
	f.String("status-lock-root", statuspage.DefaultLockRoot, "znode folder of the locks the status page on the admin listener shows (coordrun run's --root)")
	f.String("status-cron-root", statuspage.DefaultCronRoot, "znode folder of the cron jobs the status page shows (coordrun cron's --root)")
	f.Duration("remove-idle-locks", 7*24*time.Hour, "the leader removes a lock folder under --status-lock-root that nobody has held or waited for this long (0: never)")
	f.String("log-format", "text", "log format on stderr: text or json")
	f.String("log-level", "info", "log level: debug, info, warn, error")
	addServerTLSFlags(f)
	f.String("peer-secret-file", "", "file holding the ensemble secret that authenticates members to each other (create it with: coordrun ensemble secret > FILE; chmod 600 FILE); every member needs the same one")
	f.Bool("insecure-peers", false, "run the peer port without --peer-secret-file or --peer-tls-* on a non-loopback address: anyone who reaches it can act as a member (firewall it)")
	f.String("tls-client-identity", string(ensemble.CertIdentityDN), "what of a client certificate verified by --tls-client-ca becomes its x509 identity for ACLs: "+
		"dn (the subject DN, as ZooKeeper), san-dns, san-uri, san-email, san-ip (each SAN of that type), cn, o, ou (each value of that subject attribute, as O=ops)")
	return cmd
}

// clientIdentity reads --tls-client-identity; a form other than dn needs
// client certificates to take it from.
func clientIdentity(v interface{ GetString(string) string }) (ensemble.CertIdentity, error) {
	id, err := ensemble.ParseCertIdentity(v.GetString("tls-client-identity"))
	if err != nil {
		return "", usageError{fmt.Errorf("--tls-client-identity (config key tls-client-identity): %w", err)}
	}
	if id != ensemble.CertIdentityDN && v.GetString("tls-client-ca") == "" {
		return "", usageError{fmt.Errorf("--tls-client-identity %s needs --tls-client-ca: identities come from the client certificates it verifies", id)}
	}
	return id, nil
}

func runServer(cmd *cobra.Command, _ []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), v.GetString("log-format"), v.GetString("log-level"))
	if err != nil {
		return err
	}
	peers, err := ensemble.ParsePeers(v.GetString("peers"))
	if err != nil {
		return usageError{fmt.Errorf("--peers: %w", err)}
	}
	cfg := ensemble.Config{
		ID:                v.GetString("id"),
		DataDir:           v.GetString("data-dir"),
		ClientAddr:        v.GetString("client-addr"),
		PeerAddr:          v.GetString("peer-addr"),
		Peers:             peers,
		PeerForwarded:     v.GetBool("peer-forwarded"),
		MinSessionTimeout: v.GetDuration("min-session-timeout"),
		MaxSessionTimeout: v.GetDuration("max-session-timeout"),
		MaxDataBytes:      v.GetInt("max-data-bytes"),
		HeartbeatTimeout:  v.GetDuration("heartbeat-timeout"),
		ElectionTimeout:   v.GetDuration("election-timeout"),
		SnapshotThreshold: v.GetUint64("snapshot-threshold"),
		SnapshotRetain:    v.GetInt("snapshot-retain"),
		SnapshotInterval:  v.GetDuration("snapshot-interval"),
		MaxTreeNodes:      v.GetInt("max-tree-nodes"),
		EnforceQuota:      v.GetBool("enforce-quota"),
		TrailingLogs:      v.GetUint64("trailing-logs"),
		AdminAddr:         v.GetString("admin-addr"),
		Pprof:             v.GetBool("admin-pprof"),
		StatusLockRoot:    v.GetString("status-lock-root"),
		StatusCronRoot:    v.GetString("status-cron-root"),
		RemoveIdleLocks:   v.GetDuration("remove-idle-locks"),
		SuperDigest:       v.GetString("super-digest"),
		SuperX509:         v.GetStringSlice("super-x509"),
		AdminSocket:       v.GetString("admin-socket"),
		AdminSocketUIDs:   v.GetIntSlice("admin-socket-uids"),
		FourLetterWords:   v.GetStringSlice("four-letter-words"),
		Join:              v.GetBool("join"),
		Restore:           v.GetString("restore"),
		Logger:            log,
	}
	switch n := v.GetInt("max-client-conns"); {
	case n < 0:
		return usageError{fmt.Errorf("--max-client-conns %d: want a count, or 0 for no cap", n)}
	case n == 0:
		cfg.MaxClientConns = -1 // the Config's "no cap"; its 0 takes the default
	default:
		cfg.MaxClientConns = n
	}
	for _, s := range v.GetStringSlice("admin-from") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return usageError{fmt.Errorf("--admin-from %q: %w", s, err)}
		}
		cfg.AdminFrom = append(cfg.AdminFrom, p)
	}
	for _, s := range v.GetStringSlice("admin-allow") {
		p, err := ensemble.ParseAdminNetwork(s)
		if err != nil {
			return usageError{fmt.Errorf("--admin-allow: %w", err)}
		}
		cfg.AdminAllow = append(cfg.AdminAllow, p)
	}
	cfg.AdminHosts = v.GetStringSlice("admin-host")
	if cfg.Join && cfg.Restore != "" {
		return usageError{errors.New("--join and --restore exclude each other: a joining member gets its data from the ensemble")}
	}
	if v.GetBool("dev") {
		if cfg.ID == "" {
			cfg.ID = "1"
		}
		if cfg.PeerAddr == "" {
			cfg.PeerAddr = "127.0.0.1:0"
		}
		// A throwaway member serves this host only unless told otherwise.
		if !cmd.Flags().Changed("client-addr") && !v.InConfig("client-addr") && os.Getenv("COORDRUN_CLIENT_ADDR") == "" {
			cfg.ClientAddr = "127.0.0.1:2181"
		}
		if cfg.DataDir == "" {
			dir, err := os.MkdirTemp("", "coordrun-dev-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.DataDir = dir
		}
		if len(cfg.Peers) > 0 {
			return usageError{fmt.Errorf("--dev runs a single member; drop --peers")}
		}
	}
	if cfg.ClientTLS, cfg.PeerTLS, err = serverTLS(v); err != nil {
		return err
	}
	if cfg.ClientIdentity, err = clientIdentity(v); err != nil {
		return err
	}
	if path := v.GetString("peer-secret-file"); path != "" {
		if cfg.PeerTLS != nil {
			return usageError{errors.New("--peer-secret-file and --peer-tls-* exclude each other: choose one way to authenticate members")}
		}
		if cfg.PeerSecret, err = ensemble.ReadPeerSecretFile(path); err != nil {
			return usageError{fmt.Errorf("--peer-secret-file: %w", err)}
		}
	}
	cfg.InsecurePeers = v.GetBool("insecure-peers")
	if cfg.MaxTreeBytes, err = ensemble.ParseSize(v.GetString("max-tree-bytes")); err != nil {
		return usageError{fmt.Errorf("--max-tree-bytes: %w", err)}
	}
	if cfg.MaxTreeNodes < 1 || cfg.MaxTreeBytes < 1 {
		return usageError{errors.New("--max-tree-nodes and --max-tree-bytes must be positive: they bound the tree; raise them rather than remove them")}
	}
	if d := cfg.RemoveIdleLocks; d != 0 && d < minRemoveIdleLocks {
		return usageError{fmt.Errorf("--remove-idle-locks %v: at least %v, or 0 for never: a lock folder's record tells the next holder whether the last one ended cleanly (--lock-delay), and must outlive that", d, minRemoveIdleLocks)}
	}
	cfg.StoreCheck = checkStoreInChild
	warnReadableSecret(log, v.ConfigFileUsed(), v.InConfig("super-digest"))
	created := missingAncestor(cfg.DataDir)
	m, err := ensemble.Start(cfg)
	if err != nil && created != "" {
		// A refused start leaves no trace: what it made would be taken
		// next time for a member that once ran here.
		if rerr := os.RemoveAll(created); rerr != nil {
			log.Warn("could not remove the data dir this failed start created", "dir", created, "err", rerr)
		}
	}
	if errors.Is(err, ensemble.ErrConfig) {
		return usageError{settingError(err, v.ConfigFileUsed())}
	}
	if err != nil {
		return err
	}
	log.Info("serving", "id", cfg.ID, "client_addr", m.ClientAddr(), "peer_addr", m.PeerAddr(), "data_dir", cfg.DataDir)
	sd := startSdNotify(cmd.Context(), m, log)
	handleAbort(log, cfg.DataDir, sd.lastWord)
	<-cmd.Context().Done()
	sd.stopping()
	log.Info("shutting down")
	return m.Close()
}

// requiredKeys are the names (flag and config key) of the member settings
// without a default.
var requiredKeys = map[string]string{"ID": "id", "DataDir": "data-dir", "PeerAddr": "peer-addr"}

// settingError says a member configuration error in the terms the admin
// set it in: the member checks its configuration, the command names the
// setting. With a config file (that of coordrun-server.service, say) the
// missing setting is named as its key in that file, else as the flag;
// both forms name the others.
func settingError(err error, configFile string) error {
	var ce *ensemble.ConfigError
	if errors.As(err, &ce) && errors.Is(err, ensemble.ErrRequired) {
		if key, ok := requiredKeys[ce.Field]; ok {
			env := "COORDRUN_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
			if configFile != "" {
				return fmt.Errorf("config key %s is not set in %s (or --%s, %s)", key, configFile, key, env)
			}
			return fmt.Errorf("--%s is required (or config key %s, %s; or --dev)", key, key, env)
		}
	}
	return err
}

// minRemoveIdleLocks is the shortest --remove-idle-locks a member takes.
const minRemoveIdleLocks = time.Minute

// missingAncestor is the outermost of dir and its ancestors that does not
// exist yet (what a start would create), or "" when dir exists.
func missingAncestor(dir string) string {
	if dir == "" {
		return ""
	}
	dir = filepath.Clean(dir)
	missing := ""
	for {
		if _, err := os.Lstat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = dir
		parent := filepath.Dir(dir)
		if parent == dir {
			return missing
		}
		dir = parent
	}
}
