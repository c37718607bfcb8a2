package ensemble

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

const zkCliPath = "/usr/share/zookeeper/bin/zkCli.sh"

// Apache ZooKeeper's CLI, on the Netty socket with a client keystore,
// gets a session on a TLS member, is authenticated by its certificate
// without an auth command, and reads what an x509 ACL grants its DN.
func TestZkCliX509(t *testing.T) {
	for _, need := range []string{zkCliPath, "keytool"} {
		if _, err := exec.LookPath(need); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI: %v", need, err)
			}
			t.Skipf("%s is not installed (%v)", need, err)
		}
	}
	ca := testkit.NewCA(t, "zkCli client CA")
	addr := x509Member(t, ca, CertIdentityDN)
	dir := t.TempDir()
	const pass = "zkcli-secret"
	const dn = "CN=zkcli,OU=batch,O=ops"
	keystore, truststore := javaStores(t, dir, ca, dn, pass)

	admin := x509Client(t, addr, ca, ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "admin", Organization: []string{"ops"}}}))
	if _, err := admin.Create("/for-zkcli", []byte("granted by DN"), 0, []zk.ACL{x509ACL(zk.PermRead, dn)}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create("/not-for-zkcli", []byte("hidden"), 0, []zk.ACL{x509ACL(zk.PermAll, "CN=admin,O=ops")}); err != nil {
		t.Fatal(err)
	}

	out := runZkCli(t, addr, []string{
		// Debian 12's package leaves two jars the Netty socket needs off
		// the client's classpath; a later -cp replaces zkEnv.sh's.
		"-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar",
		"-Dzookeeper.client.secure=true",
		"-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
		"-Dzookeeper.ssl.keyStore.location=" + keystore,
		"-Dzookeeper.ssl.keyStore.password=" + pass,
		"-Dzookeeper.ssl.trustStore.location=" + truststore,
		"-Dzookeeper.ssl.trustStore.password=" + pass,
	}, "whoami\nget /for-zkcli\nget /not-for-zkcli\nquit\n")
	for _, want := range []string{
		"Auth scheme: User\n",
		"ip: 127.0.0.1\n",
		"x509: " + dn + "\n",
		"granted by DN\n",
		"Insufficient permission : /not-for-zkcli",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("zkCli output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("zkCli read a node its identity is not granted:\n%s", out)
	}
}

// javaStores makes PKCS#12 stores for a Java client with keytool: a key
// store holding a new key with subject dn and its certificate from ca
// (keytool generates the key and the request, the test CA signs it), and
// a trust store holding ca.
func javaStores(t *testing.T, dir string, ca *testkit.CA, dn, pass string) (keystore, truststore string) {
	t.Helper()
	keystore, truststore = filepath.Join(dir, "client.p12"), filepath.Join(dir, "trust.p12")
	caPEM, csrFile, chainPEM := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.csr"), filepath.Join(dir, "chain.pem")
	if err := os.WriteFile(caPEM, testkit.PEM("CERTIFICATE", ca.Cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	store := []string{"-storetype", "PKCS12", "-storepass", pass}
	keytool(t, append([]string{"-genkeypair", "-alias", "client", "-keyalg", "EC", "-groupname", "secp256r1",
		"-dname", dn, "-validity", "2", "-keystore", keystore, "-keypass", pass}, store...)...)
	keytool(t, append([]string{"-certreq", "-alias", "client", "-keystore", keystore, "-file", csrFile}, store...)...)

	b, err := os.ReadFile(csrFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("keytool wrote no PEM request:\n%s", b)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatal(err)
	}
	der := ca.Sign(t, &x509.Certificate{
		RawSubject:  csr.RawSubject,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, csr.PublicKey)
	if got, err := rfc2253Name(csr.RawSubject); err != nil || got != dn {
		t.Fatalf("keytool's subject reads %q, %v; want %q", got, err, dn)
	}
	if err := os.WriteFile(chainPEM, testkit.PEM("CERTIFICATE", der, ca.Cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	// The CA first, so that keytool can verify the reply's chain.
	keytool(t, append([]string{"-importcert", "-noprompt", "-alias", "ca", "-file", caPEM, "-keystore", keystore}, store...)...)
	keytool(t, append([]string{"-importcert", "-noprompt", "-alias", "client", "-file", chainPEM, "-keystore", keystore}, store...)...)
	keytool(t, append([]string{"-importcert", "-noprompt", "-alias", "ca", "-file", caPEM, "-keystore", truststore}, store...)...)
	return keystore, truststore
}

func keytool(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "keytool", append(args, "-J-XX:TieredStopAtLevel=1")...).CombinedOutput()
	if err != nil {
		t.Fatalf("keytool %s: %v\n%s", args[0], err, out)
	}
}

// runZkCli runs zkCli.sh against server in its line mode, reading the
// commands from stdin, with extra JVM flags; stdout and stderr share one
// buffer so that errors stay next to the command that caused them.
func runZkCli(t *testing.T, server string, jvmFlags []string, stdin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zkCliPath, "-server", server)
	cmd.Env = append(os.Environ(),
		"JVMFLAGS=-Dzookeeper.root.logger=ERROR,CONSOLE -Dzookeeper.console.threshold=ERROR "+strings.Join(jvmFlags, " "),
		"CLIENT_JVMFLAGS=-XX:TieredStopAtLevel=1 -Xshare:auto",
		"ZOO_LOG_DIR="+t.TempDir(),
	)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ctx.Err() != nil) {
		t.Fatalf("zkCli.sh: %v\n%s", err, out.String())
	}
	return out.String()
}
