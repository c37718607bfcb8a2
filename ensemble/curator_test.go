package ensemble

// Interop with Apache Curator (Debian's libcurator-framework-java and
// libcurator-recipes-java): testdata/curator/CuratorInterop.java is compiled
// against Debian's jars and run against a 3-member ensemble. The test is
// skipped when Java or the jars are missing, unless CI is set.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// curatorJars are the jars of Debian's libcurator-*-java packages and what
// their manifests' Class-Path names (dpkg -L, unzip -p … MANIFEST.MF).
var (
	curatorRequiredJars = []string{
		"curator-framework.jar", "curator-client.jar", "curator-recipes.jar",
		"zookeeper.jar", "zookeeper-jute.jar", "guava.jar", "slf4j-api.jar",
	}
	curatorOptionalJars = []string{
		"slf4j-simple.jar", // warnings to stderr, shown on failure
		"jackson-databind.jar", "jackson-core.jar", "jackson-annotations.jar",
		"netty-buffer.jar", "netty-common.jar", "netty-handler.jar", "netty-transport.jar",
		"netty-transport-native-epoll.jar", "netty-transport-native-unix-common.jar",
		"netty-resolver.jar", "netty-codec.jar", "metrics-core.jar", "commons-cli.jar",
		"snappy-java.jar",
	}
)

const debianJavaDir = "/usr/share/java"

func TestCuratorInterop(t *testing.T) {
	javac, errc := exec.LookPath("javac")
	java, errj := exec.LookPath("java")
	if errc != nil || errj != nil {
		interopMissing(t, "no javac/java on PATH")
	}
	var cp []string
	for _, j := range curatorRequiredJars {
		p := filepath.Join(debianJavaDir, j)
		if _, err := os.Stat(p); err != nil {
			interopMissing(t, "missing "+p+" (apt-get install libcurator-framework-java libcurator-recipes-java)")
		}
		cp = append(cp, p)
	}
	for _, j := range curatorOptionalJars {
		if p := filepath.Join(debianJavaDir, j); fileExists(p) {
			cp = append(cp, p)
		}
	}

	// Compile while the ensemble starts.
	classes := t.TempDir()
	compiled := make(chan error, 1)
	var compileOut []byte
	go func() {
		cmd := exec.Command(javac, "-nowarn", "-d", classes, "-cp", strings.Join(cp, ":"),
			filepath.Join("testdata", "curator", "CuratorInterop.java"))
		var err error
		compileOut, err = cmd.CombinedOutput()
		compiled <- err
	}()
	c := startCluster(t, 3)
	if err := <-compiled; err != nil {
		t.Fatalf("javac: %v\n%s", err, compileOut)
	}

	p := startInterop(t, 40*time.Second, java,
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.logFile=System.err",
		"-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-cp", strings.Join(append([]string{classes}, cp...), ":"),
		"CuratorInterop", strings.Join(c.Servers(), ","))
	p.finish()
	p.expectOK("connected", "create_parent_containers", "curator_cache", "mutex", "leader_latch", "closed")
	if t.Failed() {
		t.Logf("Curator's stderr:\n%s", p.stderr.String())
		return
	}

	// Closing cleanly closed the sessions: no lock or latch node is left.
	zc := testkit.DialZK(t, c.Servers(), 6*time.Second)
	for _, dir := range []string{"/curator/lock", "/curator/leader"} {
		kids, _, err := zc.Children(dir)
		if err != nil && err != zk.ErrNoNode {
			t.Errorf("children %s: %v", dir, err)
		}
		if len(kids) != 0 {
			t.Errorf("%s still has %v after Curator closed", dir, kids)
		}
	}
	// Against ZooKeeper 3.8 this program logs nothing at ERROR. (A WARN
	// "An exception was thrown while closing send thread" at close is a
	// benign race between the server closing and the client doing so.)
	if stderr := p.stderr.String(); strings.Contains(stderr, " ERROR ") {
		t.Errorf("Curator logged errors:\n%s", stderr)
	} else if stderr != "" {
		t.Logf("Curator's stderr:\n%s", stderr)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
