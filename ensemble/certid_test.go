package ensemble

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordrun/coordrun/ensemble/tree"
	"github.com/coordrun/coordrun/ensemble/wire"
	"github.com/coordrun/coordrun/internal/testkit"
	"github.com/go-zookeeper/zk"
)

// rawName encodes a Name from RDNs of (OID, ASN.1 string tag, value), so
// that tests control string types and multi-valued RDNs exactly.
type rawATV struct {
	oid   asn1.ObjectIdentifier
	tag   int
	value []byte
}

func rawName(t testing.TB, rdns ...[]rawATV) []byte {
	t.Helper()
	type enc struct {
		Type  asn1.ObjectIdentifier
		Value asn1.RawValue
	}
	type encSET []enc
	var seq []encSET
	for _, rdn := range rdns {
		var set encSET
		for _, a := range rdn {
			set = append(set, enc{Type: a.oid, Value: asn1.RawValue{Class: asn1.ClassUniversal, Tag: a.tag, Bytes: a.value}})
		}
		seq = append(seq, set)
	}
	b, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func utf8ATV(oid asn1.ObjectIdentifier, v string) rawATV {
	return rawATV{oid: oid, tag: tagUTF8String, value: []byte(v)}
}

func bmp(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}

var (
	oidCountry = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidSerial  = asn1.ObjectIdentifier{2, 5, 4, 5}
	oidEmail   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
	oidDC      = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	oidUID     = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}
)

// dnCases are subjects with the DN Java's X500Principal.getName() gives
// for them; TestRFC2253NameMatchesJava checks the expectations against a
// JVM.
func dnCases(t testing.TB) []struct {
	name string
	raw  []byte
	want string
} {
	return []struct {
		name string
		raw  []byte
		want string
	}{
		{"most specific first", rawName(t,
			[]rawATV{{oidOrganization, tagPrintableString, []byte("ops")}},
			[]rawATV{{oidOrgUnit, tagPrintableString, []byte("batch")}},
			[]rawATV{{oidCommonName, tagPrintableString, []byte("host1")}}),
			"CN=host1,OU=batch,O=ops"},
		{"keywords", rawName(t,
			[]rawATV{utf8ATV(oidDC, "org")}, []rawATV{utf8ATV(oidDC, "example")},
			[]rawATV{{oidCountry, tagPrintableString, []byte("CH")}},
			[]rawATV{utf8ATV(asn1.ObjectIdentifier{2, 5, 4, 8}, "Zug")},
			[]rawATV{utf8ATV(asn1.ObjectIdentifier{2, 5, 4, 7}, "Baar")},
			[]rawATV{utf8ATV(asn1.ObjectIdentifier{2, 5, 4, 9}, "Main St 1")},
			[]rawATV{utf8ATV(oidUID, "u123")}),
			"UID=u123,STREET=Main St 1,L=Baar,ST=Zug,C=CH,DC=example,DC=org"},
		{"special characters escaped", rawName(t, []rawATV{utf8ATV(oidCommonName, `a,b+c=d"e\f<g>h;i#j`)}),
			`CN=a\,b\+c\=d\"e\\f\<g\>h\;i\#j`},
		{"leading and trailing spaces", rawName(t, []rawATV{utf8ATV(oidCommonName, "  two  ")}),
			`CN=\ \ two\ \ `},
		{"leading hash", rawName(t, []rawATV{utf8ATV(oidCommonName, "#1")}), `CN=\#1`},
		{"carriage return at the edges", rawName(t, []rawATV{utf8ATV(oidCommonName, "\rx\r")}), "CN=\\\rx\\\r"},
		{"NUL", rawName(t, []rawATV{utf8ATV(oidCommonName, "a\x00b")}), `CN=a\00b`},
		{"non-ASCII as is", rawName(t, []rawATV{utf8ATV(oidCommonName, "Zürich ☃ 𝄞")}), "CN=Zürich ☃ 𝄞"},
		// DER sorts a SET by encoding: CN (2.5.4.3) before OU (2.5.4.11).
		{"multi-valued RDN in encoded order", rawName(t,
			[]rawATV{{oidOrganization, tagPrintableString, []byte("ops")}},
			[]rawATV{{oidOrgUnit, tagPrintableString, []byte("batch")}, {oidCommonName, tagPrintableString, []byte("host1")}}),
			"CN=host1+OU=batch,O=ops"},
		{"attribute without keyword: OID and hex", rawName(t,
			[]rawATV{{oidEmail, tagIA5String, []byte("ops@example.org")}},
			[]rawATV{{oidSerial, tagPrintableString, []byte("42")}},
			[]rawATV{{oidCommonName, tagPrintableString, []byte("host1")}}),
			"CN=host1,2.5.4.5=#13023432,1.2.840.113549.1.9.1=#160f6f7073406578616d706c652e6f7267"},
		{"string types", rawName(t,
			[]rawATV{{oidOrganization, tagT61String, []byte("t61")}},
			[]rawATV{{oidOrgUnit, tagIA5String, []byte("ia5")}},
			[]rawATV{{oidCommonName, tagUTF8String, []byte("utf8")}}),
			"CN=utf8,OU=ia5,O=t61"},
		// JDK 17 decodes a BMPString's UTF-16 as UTF-8 (writing
		// "\00b\00m..."); later JDKs decode it as UTF-16, as here.
		{"BMPString", rawName(t, []rawATV{{oidCommonName, tagBMPString, bmp("bmp-ü")}}), "CN=bmp-ü"},
		{"empty value", rawName(t, []rawATV{utf8ATV(oidOrganization, "x")}, []rawATV{utf8ATV(oidCommonName, "")}), "CN=,O=x"},
		{"empty subject", rawName(t), ""},
	}
}

func TestRFC2253Name(t *testing.T) {
	for _, c := range dnCases(t) {
		got, err := rfc2253Name(c.raw)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// bmpJDK17 is what JDK 17 writes for the BMPString case.
const bmpJDK17 = "CN=\\00b\\00m\\00p\\00-\\00\uFFFD"

// x500NamesJava prints X500Principal.getName() of each certificate file,
// base64 of its UTF-8, one a line.
const x500NamesJava = `import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Base64;

public class X500Names {
    public static void main(String[] args) throws Exception {
        CertificateFactory f = CertificateFactory.getInstance("X.509");
        for (String p : args) {
            try (InputStream in = Files.newInputStream(Paths.get(p))) {
                X509Certificate c = (X509Certificate) f.generateCertificate(in);
                String n = c.getSubjectX500Principal().getName();
                System.out.println(Base64.getEncoder().encodeToString(n.getBytes(StandardCharsets.UTF_8)));
            }
        }
    }
}
`

// requireJava returns the java binary, skipping the test without one
// unless CI is set.
func requireJava(t *testing.T) string {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("java is required in CI: %v", err)
		}
		t.Skipf("no java: %v", err)
	}
	return java
}

// The DN of every case, as a JVM writes it, is what rfc2253Name writes.
func TestRFC2253NameMatchesJava(t *testing.T) {
	java := requireJava(t)
	ca := testkit.NewCA(t, "dn test CA")
	dir := t.TempDir()
	src := filepath.Join(dir, "X500Names.java")
	if err := os.WriteFile(src, []byte(x500NamesJava), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := dnCases(t)
	args := []string{"-Xshare:auto", "-XX:TieredStopAtLevel=1", src}
	for i, c := range cases {
		// A SAN, or Java refuses the certificate with the empty subject.
		cert := ca.Issue(t, testkit.CertSpec{RawSubject: c.raw, DNSNames: []string{"dn.example"}})
		f := filepath.Join(dir, fmt.Sprintf("%d.der", i))
		if err := os.WriteFile(f, cert.Certificate[0], 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("java printed %d names for %d certificates:\n%s", len(lines), len(cases), out)
	}
	for i, c := range cases {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(lines[i]))
		if err != nil {
			t.Fatalf("java output %q: %v", lines[i], err)
		}
		if string(b) != c.want && !(c.name == "BMPString" && string(b) == bmpJDK17) {
			t.Errorf("%s: Java writes %q, the case expects %q", c.name, b, c.want)
		}
	}
}

func TestCertIdentities(t *testing.T) {
	ca := testkit.NewCA(t, "identity test CA")
	cert := ca.Issue(t, testkit.CertSpec{
		Subject:  pkix.Name{CommonName: "host1", OrganizationalUnit: []string{"batch", "nightly"}, Organization: []string{"ops, inc"}},
		DNSNames: []string{"host1.ops.example", "ops.example", "ops.example"},
		Emails:   []string{"host1@ops.example"},
		URIs:     []string{"spiffe://ops.example/host1"},
		IPs:      []net.IP{net.IPv4(10, 0, 0, 7), net.ParseIP("fd00::7")},
	}).Leaf
	x := func(ids ...string) []tree.Identity {
		var out []tree.Identity
		for _, id := range ids {
			out = append(out, tree.Identity{Scheme: "x509", ID: id})
		}
		return out
	}
	ous := certIdentities(cert, CertIdentityOU)
	slices.SortFunc(ous, func(a, b tree.Identity) int { return strings.Compare(a.ID, b.ID) })
	for kind, want := range map[CertIdentity][]tree.Identity{
		CertIdentityDN:       x(`CN=host1,` + ouPart(t, cert) + `,O=ops\, inc`),
		CertIdentityCN:       x("CN=host1"),
		CertIdentityO:        x(`O=ops\, inc`),
		CertIdentitySANDNS:   x("host1.ops.example", "ops.example"),
		CertIdentitySANEmail: x("host1@ops.example"),
		CertIdentitySANURI:   x("spiffe://ops.example/host1"),
		CertIdentitySANIP:    x("10.0.0.7", "fd00::7"),
	} {
		if got := certIdentities(cert, kind); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
	if want := x("OU=batch", "OU=nightly"); !slices.Equal(ous, want) {
		t.Errorf("ou: %v, want %v", ous, want)
	}
	bare := ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "bare"}}).Leaf
	for _, kind := range []CertIdentity{CertIdentitySANDNS, CertIdentitySANURI, CertIdentityO} {
		if got := certIdentities(bare, kind); len(got) != 0 {
			t.Errorf("%s of a certificate without one: %v", kind, got)
		}
	}
	for _, s := range []string{"", "dn", "DN", " san-dns ", "san-uri", "san-email", "san-ip", "cn", "o", "OU"} {
		if _, err := ParseCertIdentity(s); err != nil {
			t.Errorf("ParseCertIdentity(%q): %v", s, err)
		}
	}
	for _, s := range []string{"subject", "san", "c", "dn,o"} {
		if _, err := ParseCertIdentity(s); err == nil {
			t.Errorf("ParseCertIdentity(%q) accepted", s)
		}
	}
}

// ouPart is the multi-valued OU RDN as encoded (Go puts the values of
// one attribute in one RDN).
func ouPart(t *testing.T, cert *x509.Certificate) string {
	rdns, err := parseRDNs(cert.RawSubject)
	if err != nil {
		t.Fatal(err)
	}
	for _, rdn := range rdns {
		if len(rdn) > 0 && rdn[0].Type.Equal(oidOrgUnit) {
			var parts []string
			for _, a := range rdn {
				parts = append(parts, a.rfc2253())
			}
			return strings.Join(parts, "+")
		}
	}
	t.Fatal("no OU in the subject")
	return ""
}

func TestClientIdentityConfig(t *testing.T) {
	ca := testkit.NewCA(t, "config CA")
	for name, c := range map[string]struct {
		id     CertIdentity
		tls    bool
		wantOK bool
	}{
		"default":                  {"", false, true},
		"dn without TLS":           {CertIdentityDN, false, true},
		"o with TLS":               {CertIdentityO, true, true},
		"unknown":                  {"subject", true, false},
		"upper case":               {"O", true, false},
		"attribute without TLS":    {CertIdentityO, false, false},
		"SAN type without TLS":     {CertIdentitySANDNS, false, false},
		"SAN type with client TLS": {CertIdentitySANURI, true, true},
	} {
		cfg := Config{ID: "1", DataDir: t.TempDir(), PeerAddr: "127.0.0.1:0", ClientIdentity: c.id}
		if c.tls {
			cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("m"))}, ClientCAs: ca.Pool}
		}
		err := cfg.setDefaults()
		if c.wantOK != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// x509Member is a single TLS member whose client port requires
// certificates of ca, with the given identity form.
func x509Member(t *testing.T, ca *testkit.CA, id CertIdentity) string {
	t.Helper()
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("member"))}, ClientCAs: ca.Pool}
		cfg.ClientIdentity = id
	})
	return c.cfgs[0].ClientAddr
}

// x509Client is a go-zookeeper session over TLS presenting cert.
func x509Client(t *testing.T, addr string, ca *testkit.CA, cert tls.Certificate) *zk.Conn {
	t.Helper()
	return testkit.DialZK(t, []string{addr}, 4*time.Second, testkit.ZKTLS(ca.ClientTLS(cert)))
}

// whoAmI asks over a raw TLS session, which go-zookeeper cannot.
// whoAmI is the identities a connection with cert holds, sorted: the order
// whoAmI lists them in is ZooKeeper's set order, tested in package zk.
func whoAmI(t *testing.T, addr string, ca *testkit.CA, cert tls.Certificate) []wire.ClientInfo {
	t.Helper()
	w := tlsW(t, addr, ca.ClientTLS(cert))
	defer w.close()
	var r wire.WhoAmIResponse
	w.ok(wire.OpWhoAmI, nil, &r)
	return sortedInfo(r.ClientInfo)
}

func sortedInfo(ci []wire.ClientInfo) []wire.ClientInfo {
	ci = slices.Clone(ci)
	slices.SortFunc(ci, func(a, b wire.ClientInfo) int {
		return strings.Compare(a.AuthScheme+":"+a.User, b.AuthScheme+":"+b.User)
	})
	return ci
}

func x509ACL(perms int32, id string) zk.ACL {
	return zk.ACL{Perms: perms, Scheme: "x509", ID: id}
}

func loopbackInfo() wire.ClientInfo { return wire.ClientInfo{AuthScheme: "ip", User: "127.0.0.1"} }

// With the default form the identity is the subject DN, granted by an
// ACL naming it exactly; "auth" expands to it; an auth packet of scheme
// x509 changes nothing; an empty x509 id is an invalid ACL.
func TestX509IdentityDN(t *testing.T) {
	ca := testkit.NewCA(t, "client CA")
	addr := x509Member(t, ca, CertIdentityDN)
	cert1 := ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host1", OrganizationalUnit: []string{"batch"}, Organization: []string{"ops"}}})
	host1 := x509Client(t, addr, ca, cert1)
	host2 := x509Client(t, addr, ca, ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host2", OrganizationalUnit: []string{"batch"}, Organization: []string{"ops"}}}))

	const dn1 = "CN=host1,OU=batch,O=ops"
	want := []wire.ClientInfo{loopbackInfo(), {AuthScheme: "x509", User: dn1}}
	if got := whoAmI(t, addr, ca, cert1); !slices.Equal(got, sortedInfo(want)) {
		t.Fatalf("whoAmI = %+v, want %+v", got, want)
	}
	if _, err := host1.Create("/dn", []byte("host1's"), 0, []zk.ACL{x509ACL(zk.PermAll, dn1)}); err != nil {
		t.Fatal(err)
	}
	if data, _, err := host1.Get("/dn"); err != nil || string(data) != "host1's" {
		t.Fatalf("host1 reading its node: %q, %v", data, err)
	}
	if _, _, err := host2.Get("/dn"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("host2 reading host1's node: %v, want NOAUTH", err)
	}

	if _, err := host1.Create("/auth", nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}}); err != nil {
		t.Fatal(err)
	}
	acl, _, err := host1.GetACL("/auth")
	if err != nil || !slices.Equal(acl, []zk.ACL{x509ACL(zk.PermAll, dn1)}) {
		t.Fatalf("auth ACL expanded to %+v, %v", acl, err)
	}
	if _, err := host1.SetACL("/auth", []zk.ACL{x509ACL(zk.PermAll, "")}, -1); !errors.Is(err, zk.ErrInvalidACL) {
		t.Fatalf("setACL x509 with an empty id: %v, want INVALIDACL", err)
	}
	if _, err := host1.SetACL("/auth", []zk.ACL{x509ACL(zk.PermRead, dn1), x509ACL(zk.PermAll, "CN=admin")}, -1); err != nil {
		t.Fatalf("setACL with x509 entries: %v", err)
	}

	// As ZooKeeper's provider does: the payload is ignored, the
	// certificate authenticated again, the identities unchanged.
	w := tlsW(t, addr, ca.ClientTLS(cert1))
	a := w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "x509", Auth: []byte("CN=admin")})
	eq(t, "auth x509 with a certificate", a.h.Err, wire.OK)
	var r wire.WhoAmIResponse
	w.ok(wire.OpWhoAmI, nil, &r)
	if !slices.Equal(sortedInfo(r.ClientInfo), sortedInfo(want)) {
		t.Fatalf("whoAmI after auth x509 = %+v, want %+v", r.ClientInfo, want)
	}
}

// The point of the attribute forms: hosts with their own certificates
// share one identity, which one ACL grants; a host of another O is
// refused, for reads and for watches alike.
func TestX509IdentityAttribute(t *testing.T) {
	ca := testkit.NewCA(t, "client CA")
	addr := x509Member(t, ca, CertIdentityO)
	certOf := func(cn, o string) tls.Certificate {
		return ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: cn, Organization: []string{o}}})
	}
	cert2 := certOf("host2", "ops")
	host1, host2, host3 := x509Client(t, addr, ca, certOf("host1", "ops")), x509Client(t, addr, ca, cert2), x509Client(t, addr, ca, certOf("host3", "other"))

	if got, want := whoAmI(t, addr, ca, cert2), sortedInfo([]wire.ClientInfo{loopbackInfo(), {AuthScheme: "x509", User: "O=ops"}}); !slices.Equal(got, want) {
		t.Fatalf("whoAmI = %+v, want %+v", got, want)
	}
	if _, err := host1.Create("/ops", []byte("v1"), 0, []zk.ACL{x509ACL(zk.PermAll, "O=ops")}); err != nil {
		t.Fatal(err)
	}
	_, _, watch2, err := host2.GetW("/ops")
	if err != nil {
		t.Fatalf("host2 (O=ops) reading: %v", err)
	}
	if _, _, err := host3.Get("/ops"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("host3 (O=other) reading: %v, want NOAUTH", err)
	}
	if _, err := host3.Set("/ops", []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("host3 (O=other) writing: %v, want NOAUTH", err)
	}
	// exists checks no ACL, so host3 can watch the node; it must not
	// learn of the change.
	_, _, watch3, err := host3.ExistsW("/ops")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host2.Set("/ops", []byte("v2"), -1); err != nil {
		t.Fatalf("host2 (O=ops) writing: %v", err)
	}
	select {
	case ev := <-watch2:
		if ev.Type != zk.EventNodeDataChanged {
			t.Fatalf("host2's watch: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("host2 (O=ops) was not told of the change")
	}
	// A barrier for host3's notifications: sync's reply follows them.
	if _, err := host3.Sync("/ops"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-watch3:
		t.Fatalf("host3 (O=other) was told of a change it may not read: %+v", ev)
	default:
	}
}

// The SAN forms: every SAN of the type is an identity. A certificate with
// none has no x509 identity, and an auth packet of scheme x509 then fails
// like one on a connection without a certificate.
func TestX509IdentitySAN(t *testing.T) {
	ca := testkit.NewCA(t, "client CA")
	addr := x509Member(t, ca, CertIdentitySANDNS)
	sanCert := ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host1"}, DNSNames: []string{"host1.ops.example", "ops.example"}})
	withSAN := x509Client(t, addr, ca, sanCert)
	want := []wire.ClientInfo{loopbackInfo(), {AuthScheme: "x509", User: "host1.ops.example"}, {AuthScheme: "x509", User: "ops.example"}}
	if got := whoAmI(t, addr, ca, sanCert); !slices.Equal(got, sortedInfo(want)) {
		t.Fatalf("whoAmI = %+v, want %+v", got, want)
	}
	if _, err := withSAN.Create("/san", []byte("d"), 0, []zk.ACL{x509ACL(zk.PermAll, "ops.example")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := withSAN.Get("/san"); err != nil {
		t.Fatalf("reading with the SAN identity: %v", err)
	}

	noSAN := ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host9"}})
	w := tlsW(t, addr, ca.ClientTLS(noSAN))
	var r wire.WhoAmIResponse
	w.ok(wire.OpWhoAmI, nil, &r)
	if want := []wire.ClientInfo{loopbackInfo()}; !slices.Equal(r.ClientInfo, want) {
		t.Fatalf("whoAmI without a DNS SAN = %+v, want %+v", r.ClientInfo, want)
	}
	if code := w.code(wire.OpGetData, &wire.PathWatchRequest{Path: "/san"}); code != wire.ErrNoAuth {
		t.Fatalf("reading without the identity: %v, want NOAUTH", code)
	}
	a := w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "x509"})
	eq(t, "auth x509 without an identity", a.h.Err, wire.ErrAuthFailed)
	expectClosed(t, w.rc.nc, "the connection after a failed x509 auth")
}

// A certificate of another CA never gets a session on a member that maps
// certificates to identities: it is refused at the handshake, whatever
// its subject claims.
func TestX509OtherCARefused(t *testing.T) {
	ca, rogue := testkit.NewCA(t, "client CA"), testkit.NewCA(t, "someone else's CA")
	logs := &testkit.SyncBuffer{}
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testkit.Loopback("member"))}, ClientCAs: ca.Pool}
		cfg.ClientIdentity = CertIdentityO
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	addr := c.cfgs[0].ClientAddr
	owner := x509Client(t, addr, ca, ca.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host1", Organization: []string{"ops"}}}))
	if _, err := owner.Create("/ops", nil, 0, []zk.ACL{x509ACL(zk.PermAll, "O=ops")}); err != nil {
		t.Fatal(err)
	}
	forged := rogue.Issue(t, testkit.CertSpec{Subject: pkix.Name{CommonName: "host1", Organization: []string{"ops"}}})
	// Sent although the server asks for its own CA's certificates (a Go
	// client would send none).
	tc := &tls.Config{RootCAs: ca.Pool, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forged, nil }}
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err == nil {
		// TLS 1.3: the client learns of the refusal on its first read.
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = nc.Write(encodeFrame(&wire.ConnectRequest{Timeout: 4000, Passwd: make([]byte, 16)}))
		_, err = nc.Read(make([]byte, 1))
		nc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
		t.Fatalf("a certificate of another CA: %v, want the handshake refused (unknown certificate authority)", err)
	}
	testkit.WaitFor(t, 5*time.Second, "the refusal in the log", func() bool {
		return logs.HasLine("TLS handshake refused", "port=client", "unknown authority")
	})
}

// On a plaintext member an auth packet of scheme x509 fails and ends the
// connection, as on a ZooKeeper without client certificates.
func TestX509AuthWithoutTLS(t *testing.T) {
	c := startCluster(t, 1)
	w := dialW(t, c.cfgs[0].ClientAddr)
	a := w.callXid(wire.XidAuth, wire.OpAuth, &wire.AuthPacket{Scheme: "x509", Auth: []byte("CN=admin")})
	eq(t, "auth x509 in plaintext", a.h.Err, wire.ErrAuthFailed)
	expectClosed(t, w.rc.nc, "the connection after a failed x509 auth")
}

// tlsW opens a recording raw session over TLS.
func tlsW(t *testing.T, addr string, tc *tls.Config) *wclient {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc)}
	rc.writeFrame(encodeFrame(&wire.ConnectRequest{Timeout: int32(confSessionTimeout / time.Millisecond), Passwd: make([]byte, 16)}))
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame, err := wire.ReadFrame(rc.r, nil, rawMaxFrame)
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		t.Fatalf("connect over TLS: %v", err)
	}
	if err := rc.resp.Decode(wire.NewDecoder(frame)); err != nil || rc.resp.SessionID == 0 {
		t.Fatalf("connect response %+v, %v", rc.resp, err)
	}
	return startW(t, rc)
}
