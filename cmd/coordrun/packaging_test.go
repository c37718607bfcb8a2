package main

// Tests of packaging/: the systemd units pass systemd-analyze verify, the
// default config file lists every key with its real default, and the .deb
// built by `make package` installs, runs and purges cleanly.
//
// The tools they need (systemd-analyze, make, dpkg, root) are skipped when
// missing, except in CI (CI set), where a missing tool is a failure.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// pkgRepoRoot is the repository root, seen from this package's directory.
const pkgRepoRoot = "../.."

// pkgNeed returns the path of a tool, skipping the test when it is missing
// outside CI.
func pkgNeed(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is required in CI: %v", tool, err)
		}
		t.Skipf("%s not found: %v", tool, err)
	}
	return p
}

// pkgUnits are the unit files under packaging/systemd, examples included.
func pkgUnits(t *testing.T) []string {
	t.Helper()
	var units []string
	err := filepath.WalkDir(filepath.Join(pkgRepoRoot, "packaging", "systemd"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(p) {
		case ".service", ".timer", ".socket", ".path", ".target":
			units = append(units, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(units) < 4 {
		t.Fatalf("found only %v under packaging/systemd", units)
	}
	return units
}

// pkgVerify runs systemd-analyze verify on one unit file and returns what
// it reported about our units: verify also reports on unrelated units of
// the host, which are logged and otherwise ignored. Unknown keys and bad
// values are only warnings to verify (exit 0), so any line naming one of
// our units counts.
func pkgVerify(t *testing.T, analyze, dir, file string, names []string) (problems []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// --man=no: verify would run man(1) for Documentation=; the pages are
	// checked against the generated ones instead (not installed here).
	cmd := exec.CommandContext(ctx, analyze, "verify", "--man=no", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		ours := strings.Contains(line, dir)
		for _, n := range names {
			ours = ours || strings.Contains(line, n)
		}
		if ours {
			problems = append(problems, line)
		} else {
			t.Logf("systemd-analyze verify %s (not about our units): %s", filepath.Base(file), line)
		}
	}
	if err != nil {
		problems = append(problems, fmt.Sprintf("systemd-analyze verify %s: %v", filepath.Base(file), err))
	}
	return problems
}

// TestSystemdUnitsVerify runs systemd-analyze verify on every unit file,
// copied with /usr/bin/coordrun pointing at the binary under test (verify
// checks that ExecStart= is executable). The template is verified as such
// and as an instance.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := pkgNeed(t, "systemd-analyze")
	dir := t.TempDir()
	var files, names []string
	for _, src := range pkgUnits(t) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart=/usr/bin/coordrun ")) && filepath.Ext(src) == ".service" {
			t.Errorf("%s: ExecStart= does not run /usr/bin/coordrun", src)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/bin/coordrun"), []byte(procBin))
		dst := filepath.Join(dir, filepath.Base(src))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, dst)
		names = append(names, filepath.Base(src))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "@.service") {
			files = append(files, strings.Replace(f, "@.service", "@example.service", 1))
			names = append(names, strings.Replace(filepath.Base(f), "@.service", "@example.service", 1))
		}
	}
	for _, f := range files {
		if problems := pkgVerify(t, analyze, dir, f, names); len(problems) > 0 {
			t.Errorf("%s:\n  %s", filepath.Base(f), strings.Join(problems, "\n  "))
		}
	}

	// The check itself: a unit with an unknown key and a missing
	// executable must be reported.
	bad := filepath.Join(dir, "coordrun-broken.service")
	if err := os.WriteFile(bad, []byte("[Service]\nType=notify\nExecStart=/nonexistent/coordrun server\nNoSuchKey=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if problems := pkgVerify(t, analyze, dir, bad, []string{"coordrun-broken.service"}); len(problems) < 2 {
		t.Errorf("a broken unit passed verification: %q", problems)
	}
}

// TestSystemdUnitsDocumentation checks that every Documentation=man:PAGE(1)
// of the units is a page `coordrun __docs --man` generates.
func TestSystemdUnitsDocumentation(t *testing.T) {
	dir := t.TempDir()
	if err := genManPages(newRootCommand(), dir); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`man:([a-z0-9-]+)\(([0-9])\)`)
	for _, u := range pkgUnits(t) {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		refs := re.FindAllStringSubmatch(string(b), -1)
		if len(refs) == 0 && strings.HasPrefix(filepath.Base(u), "coordrun-") {
			t.Errorf("%s: no Documentation=man:...", u)
		}
		for _, m := range refs {
			if _, err := os.Stat(filepath.Join(dir, m[1]+"."+m[2])); err != nil {
				t.Errorf("%s refers to %s, which is not generated: %v", u, m[0], err)
			}
		}
	}
}

// pkgConfigKey is one commented-out "# key: default" line of the config file.
type pkgConfigKey struct {
	line  int
	key   string
	value string // the default, normalized like pflag's DefValue
	text  string // the line, uncommented
}

// pkgConfigKeys reads the "# key: value" lines (exactly one space after
// the #; examples are indented further and are not keys).
func pkgConfigKeys(t *testing.T, file string) []pkgConfigKey {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^# ([a-z][a-z0-9-]*):(\s.*)?$`)
	var keys []pkgConfigKey
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		text := strings.TrimPrefix(sc.Text(), "# ")
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
			t.Errorf("%s:%d: %q: %v", file, n, text, err)
			continue
		}
		keys = append(keys, pkgConfigKey{line: n, key: m[1], value: pkgFlagString(doc[m[1]]), text: text})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// pkgFlagString renders a YAML value the way pflag renders defaults.
func pkgFlagString(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case []any:
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprint(x))
		}
		return "[" + strings.Join(s, ",") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// pkgLoad runs loadConfig for a subcommand with --config file.
func pkgLoad(t *testing.T, path []string, file string) error {
	t.Helper()
	cmd, _, err := newRootCommand().Find(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	_, err = loadConfig(cmd)
	return err
}

// TestPackageConfigFile checks packaging/coordrun.yaml, the default
// /etc/coordrun/coordrun.yaml: as shipped it sets nothing and loads; every
// key in it is a flag and shows that flag's default; every flag of server,
// run and cron is in it; and with every key uncommented it still loads.
func TestPackageConfigFile(t *testing.T) {
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COORDRUN_") {
			k, _, _ := strings.Cut(kv, "=")
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	file := filepath.Join(pkgRepoRoot, "packaging", "coordrun.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc) != 0 {
		t.Fatalf("as shipped the file must set nothing: %v %v", doc, err)
	}
	for _, path := range [][]string{{"server"}, {"run"}, {"cron"}, {"status"}, {"ensemble", "status"}} {
		if err := pkgLoad(t, path, file); err != nil {
			t.Errorf("coordrun %s --config %s: %v", strings.Join(path, " "), file, err)
		}
	}

	// Defaults of every flag of every command, by name.
	defaults := map[string]map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if defaults[f.Name] == nil {
				defaults[f.Name] = map[string]bool{}
			}
			defaults[f.Name][f.DefValue] = true
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCommand()
	walk(root)

	keys := pkgConfigKeys(t, file)
	listed := map[string]bool{}
	var all bytes.Buffer
	for _, k := range keys {
		ds, ok := defaults[k.key]
		switch {
		case !ok || k.key == "config" || k.key == "help":
			t.Errorf("%s:%d: %q is not a flag of any command", file, k.line, k.key)
		case !ds[k.value]:
			var want []string
			for d := range ds {
				want = append(want, strconv.Quote(d))
			}
			sort.Strings(want)
			t.Errorf("%s:%d: %s shows default %q; the flag's default is %s", file, k.line, k.key, k.value, strings.Join(want, " or "))
		}
		if !listed[k.key] {
			all.WriteString(k.text + "\n")
		}
		listed[k.key] = true
	}
	for _, name := range []string{"server", "run", "cron"} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && !listed[f.Name] {
				t.Errorf("%s: no key for --%s of coordrun %s (default %q)", file, f.Name, name, f.DefValue)
			}
		})
	}

	// Everything uncommented (each key once) is still a valid file.
	full := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(full, all.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{{"server"}, {"run"}, {"cron"}} {
		if err := pkgLoad(t, path, full); err != nil {
			t.Errorf("every key uncommented: coordrun %s: %v", strings.Join(path, " "), err)
		}
	}
}

// pkgRun runs a command and fails the test if it does not succeed.
func pkgRun(t *testing.T, d time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(procEnv(), "DEBIAN_FRONTEND=noninteractive")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Logf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), d.Round(time.Millisecond))
	}
	return string(out)
}

// pkgDpkg runs dpkg, waiting (up to a minute) while another dpkg or apt
// holds dpkg's lock, as on a shared machine installing packages.
func pkgDpkg(t *testing.T, dpkg string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, dpkg, args...)
		cmd.Env = append(procEnv(), "DEBIAN_FRONTEND=noninteractive")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			t.Logf("dpkg %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
			return
		}
		if !strings.Contains(string(out), "lock") || time.Now().After(deadline) {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("dpkg %s: waiting for dpkg's lock: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
		<-time.After(time.Second) // poll for the lock, bounded by deadline
	}
}

// pkgExists reports whether a path exists.
func pkgExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestPackageDeb builds the packages with `make package`, installs the
// .deb, runs the installed binary (version, and a --dev server that reads
// the installed /etc/coordrun/coordrun.yaml), checks the files the package
// puts in place, reinstalls it over a locally changed config file, and
// purges it. It changes the machine, so it needs root and dpkg.
func TestPackageDeb(t *testing.T) {
	ci := os.Getenv("CI") != ""
	if os.Geteuid() != 0 {
		if ci {
			t.Fatal("TestPackageDeb installs a package: CI must run it as root")
		}
		t.Skip("not root: installing a package needs root")
	}
	dpkg := pkgNeed(t, "dpkg")
	mk := pkgNeed(t, "make")
	if exec.Command("dpkg-query", "-W", "coordrun").Run() == nil || pkgExists("/usr/bin/coordrun") || pkgExists("/etc/coordrun") {
		if ci {
			t.Fatal("coordrun is already installed on this machine")
		}
		t.Skip("coordrun (or /usr/bin/coordrun, /etc/coordrun) is already on this machine; not replacing it")
	}
	root, err := filepath.Abs(pkgRepoRoot)
	if err != nil {
		t.Fatal(err)
	}

	// Build. The first run in a fresh CI machine also downloads nfpm.
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")
	pkgRun(t, 5*time.Minute, mk, "-C", root, "package", "BIN="+filepath.Join(tmp, "coordrun"), "DIST="+dist)
	debs, _ := filepath.Glob(filepath.Join(dist, "coordrun_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "coordrun-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package made debs %v and rpms %v, want one of each", debs, rpms)
	}
	if b, err := os.ReadFile(rpms[0]); err != nil || !bytes.HasPrefix(b, []byte{0xed, 0xab, 0xee, 0xdb}) {
		t.Errorf("%s is not an rpm (%v)", rpms[0], err)
	}
	// The rpm's file list and flags, where rpm is at hand (it rarely is on
	// Debian; not required).
	if rpm, err := exec.LookPath("rpm"); err == nil {
		out := pkgRun(t, 30*time.Second, rpm, "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", rpms[0])
		for _, want := range []string{"/usr/bin/coordrun ", "/etc/coordrun/coordrun.yaml cn\n", "/usr/lib/systemd/system/coordrun-server.service ", "/usr/share/zsh/site-functions/_coordrun ", "/usr/share/man/man1/coordrun-server.1.gz "} {
			if !strings.Contains(out, want) {
				t.Errorf("rpm -qp %s lacks %q:\n%s", filepath.Base(rpms[0]), want, out)
			}
		}
	}

	// Install, and whatever happens, purge again; the coordrun user and
	// group go too unless they were there before.
	hadUser := exec.Command("getent", "passwd", "coordrun").Run() == nil
	hadGroup := exec.Command("getent", "group", "coordrun").Run() == nil
	t.Cleanup(func() {
		if exec.Command("dpkg-query", "-W", "coordrun").Run() == nil {
			pkgDpkg(t, dpkg, "--purge", "coordrun")
		}
		if !hadUser {
			_ = exec.Command("userdel", "coordrun").Run()
		}
		if !hadGroup {
			_ = exec.Command("groupdel", "coordrun").Run()
		}
	})
	pkgDpkg(t, dpkg, "-i", debs[0])

	// The binary.
	out := pkgRun(t, 10*time.Second, "/usr/bin/coordrun", "version")
	if !strings.HasPrefix(out, "coordrun ") {
		t.Errorf("coordrun version: %q", out)
	}

	// The files.
	for _, p := range []string{
		"/usr/lib/systemd/system/coordrun-server.service",
		"/usr/lib/systemd/system/coordrun-server@.service",
		"/usr/lib/systemd/system/coordrun-cron@.service",
		"/usr/share/man/man1/coordrun.1.gz",
		"/usr/share/man/man1/coordrun-server.1.gz",
		"/usr/share/man/man1/coordrun-run.1.gz",
		"/usr/share/man/man1/coordrun-cron.1.gz",
		"/usr/share/bash-completion/completions/coordrun",
		"/usr/share/zsh/vendor-completions/_coordrun",
		"/usr/share/fish/vendor_completions.d/coordrun.fish",
		"/usr/share/doc/coordrun/examples/nightly.service",
		"/etc/coordrun/cron",
	} {
		if !pkgExists(p) {
			t.Errorf("%s is not installed", p)
		}
	}
	if unit, err := os.ReadFile("/usr/lib/systemd/system/coordrun-server.service"); err != nil || !bytes.Contains(unit, []byte("\nExecStart=/usr/bin/coordrun server --config /etc/coordrun/coordrun.yaml\n")) {
		t.Errorf("installed coordrun-server.service: %v\n%s", err, unit)
	}
	shipped, err := os.ReadFile(filepath.Join(root, "packaging", "coordrun.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const conf = "/etc/coordrun/coordrun.yaml"
	if b, err := os.ReadFile(conf); err != nil || !bytes.Equal(b, shipped) {
		t.Errorf("%s is not packaging/coordrun.yaml (%v)", conf, err)
	}
	if fi, err := os.Stat(conf); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v (%v), want 0644: every coordrun invocation reads it", conf, fi.Mode(), err)
	}
	if out := pkgRun(t, 10*time.Second, "dpkg-query", "-W", "-f=${Conffiles}", "coordrun"); !strings.Contains(out, conf) {
		t.Errorf("%s is not a conffile: %q", conf, out)
	}
	// The completion scripts load (bash is always there; zsh and fish
	// rarely are).
	if out := pkgRun(t, 10*time.Second, "bash", "-c", "source /usr/share/bash-completion/completions/coordrun && complete -p coordrun"); !strings.Contains(out, "coordrun") {
		t.Errorf("bash completion: %q", out)
	}

	// The system user, made by postinstall.
	pw := strings.TrimSpace(pkgRun(t, 10*time.Second, "getent", "passwd", "coordrun"))
	f := strings.Split(pw, ":")
	if len(f) != 7 || f[5] != "/var/lib/coordrun" || !strings.HasSuffix(f[6], "nologin") {
		t.Errorf("coordrun user: %q, want home /var/lib/coordrun and a nologin shell", pw)
	} else if uid, _ := strconv.Atoi(f[2]); uid == 0 || uid >= 1000 {
		t.Errorf("coordrun user: uid %d, want a system uid", uid)
	}

	// The installed server, which reads the installed config file (no
	// --config: the default path), answers and stops on SIGTERM.
	pkgServe(t, "/usr/bin/coordrun")

	// Reinstalling (dpkg's upgrade path: prerm upgrade, postinst configure)
	// keeps a changed config file, and the user.
	local := append(append([]byte{}, shipped...), "# changed here\n"...)
	if err := os.WriteFile(conf, local, 0o644); err != nil {
		t.Fatal(err)
	}
	pkgDpkg(t, dpkg, "-i", "--force-confold", debs[0])
	if b, _ := os.ReadFile(conf); !bytes.Equal(b, local) {
		t.Errorf("reinstalling replaced the changed %s", conf)
	}

	// Purge: everything of the package is gone.
	pkgDpkg(t, dpkg, "--purge", "coordrun")
	for _, p := range []string{"/usr/bin/coordrun", "/usr/lib/systemd/system/coordrun-server.service", "/usr/share/man/man1/coordrun.1.gz", "/etc/coordrun"} {
		if pkgExists(p) {
			t.Errorf("%s is still there after dpkg --purge", p)
		}
	}
}

// pkgServe starts bin server --dev on a free loopback port, waits for ruok
// to be answered with imok, and stops it with SIGTERM (exit 0).
func pkgServe(t *testing.T, bin string) {
	t.Helper()
	client := testkit.FreeAddrs(t, "127.0.0.1", 1)[0]
	cmd := exec.Command(bin, "server", "--dev", "--client-addr", client)
	cmd.Env = procEnv()
	p := testkit.Spawn(t, bin+" server --dev", cmd)
	var answer string
	testkit.WaitFor(t, 20*time.Second, "ruok to be answered", func() bool {
		answer, _ = procWord(client, "ruok", nil)
		return answer == "imok" || !p.Running()
	})
	if answer != "imok" {
		t.Fatalf("%s server --dev: ruok answered %q (exited: %v)", bin, answer, !p.Running())
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Exit(t, 15*time.Second); code != 0 {
		t.Fatalf("%s server --dev after SIGTERM: exit %d", bin, code)
	}
}

// TestServerTemplateUnit: coordrun-server@.service is
// coordrun-server.service with the instance's config file and data dir,
// every other setting (hardening, timeouts, restarts) the same.
func TestServerTemplateUnit(t *testing.T) {
	settings := func(file string, paths *strings.Replacer) []string {
		b, err := os.ReadFile(filepath.Join("..", "..", "packaging", "systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "Description=") {
				continue
			}
			out = append(out, paths.Replace(l))
		}
		return out
	}
	plain := settings("coordrun-server.service", strings.NewReplacer())
	tmpl := settings("coordrun-server@.service", strings.NewReplacer(
		"--config /etc/coordrun/%i.yaml", "--config /etc/coordrun/coordrun.yaml",
		"StateDirectory=coordrun/%i", "StateDirectory=coordrun",
		"RuntimeDirectory=coordrun/%i", "RuntimeDirectory=coordrun",
		"/run/coordrun/%i/admin.sock", "/run/coordrun/admin.sock"))
	if !slices.Equal(plain, tmpl) {
		t.Errorf("the template's settings differ from the plain unit's:\nplain:    %q\ntemplate: %q", plain, tmpl)
	}
	if !slices.Contains(settings("coordrun-server@.service", strings.NewReplacer()), "StateDirectory=coordrun/%i") {
		t.Errorf("the template has no data dir of its own")
	}
}
