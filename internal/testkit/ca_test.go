package testkit

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"testing"
)

func TestCA(t *testing.T) {
	ca := NewCA(t, "kit CA")
	server := ca.Issue(t, Loopback("server"))
	opts := x509.VerifyOptions{Roots: ca.Pool, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := server.Leaf.Verify(opts); err != nil {
		t.Errorf("loopback certificate as a server's: %v", err)
	}
	if err := server.Leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("loopback certificate for 127.0.0.1: %v", err)
	}

	client := ca.Issue(t, CertSpec{Subject: pkix.Name{CommonName: "host1", Organization: []string{"ops"}},
		DNSNames: []string{"host1.example"}, Emails: []string{"ops@example"}, URIs: []string{"spiffe://example/host1"}})
	if _, err := client.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := client.Leaf.Verify(opts); err == nil {
		t.Error("a client certificate passes as a server's")
	}
	l := client.Leaf
	if l.Subject.CommonName != "host1" || !slices.Equal(l.Subject.Organization, []string{"ops"}) ||
		!slices.Equal(l.DNSNames, []string{"host1.example"}) || !slices.Equal(l.EmailAddresses, []string{"ops@example"}) ||
		len(l.URIs) != 1 || l.URIs[0].String() != "spiffe://example/host1" {
		t.Errorf("client certificate names %v %v %v %v", l.Subject, l.DNSNames, l.EmailAddresses, l.URIs)
	}

	certFile, keyFile := ca.Files(t, "server", server)
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Errorf("written files: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(ca.File, keyFile); err == nil {
		t.Error("the CA file goes with the server's key")
	}
	if got := ca.ClientTLS(client); got.RootCAs != ca.Pool || len(got.Certificates) != 1 {
		t.Errorf("ClientTLS: %+v", got)
	}
}
