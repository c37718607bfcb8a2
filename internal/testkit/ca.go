package testkit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority. Its certificate is also
// written as a PEM file, for tests of the binary's --tls-* flags.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holds Cert alone
	File string         // Cert as PEM
	dir  string
}

// CertSpec says what a certificate names.
type CertSpec struct {
	Subject pkix.Name
	// RawSubject, when set, is the subject's DER as it is, for names
	// that pkix.Name cannot express (string types, multi-valued RDNs).
	RawSubject []byte
	DNSNames   []string
	Emails     []string
	URIs       []string
	IPs        []net.IP
	// Server makes it good for server authentication too; every
	// certificate is good for client authentication.
	Server bool
}

// Loopback is a certificate for a server or member on loopback
// (127.0.0.1, ::1, localhost) named CN=cn, good for both server and client
// authentication, as member certificates are.
func Loopback(cn string) CertSpec {
	return CertSpec{
		Subject:  pkix.Name{CommonName: cn},
		DNSNames: []string{"localhost"},
		IPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		Server:   true,
	}
}

// NewCA makes a CA named CN=name; its files go in a directory removed
// when the test ends.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{Key: newKey(t), dir: t.TempDir()}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.Key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.Pool = x509.NewCertPool()
	ca.Pool.AddCert(ca.Cert)
	ca.File = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate and key as spec says, signed by ca.
func (ca *CA) Issue(t testing.TB, spec CertSpec) tls.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		Subject:        spec.Subject,
		RawSubject:     spec.RawSubject,
		DNSNames:       spec.DNSNames,
		EmailAddresses: spec.Emails,
		IPAddresses:    spec.IPs,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, u := range spec.URIs {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der := ca.Sign(t, tmpl, &key.PublicKey)
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// Sign signs tmpl for pub, giving it a serial number and a validity from
// an hour ago to a day ahead, and returns the certificate's DER.
func (ca *CA) Sign(t testing.TB, tmpl *x509.Certificate, pub crypto.PublicKey) []byte {
	t.Helper()
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Files writes cert and its key as PEM files named after name and returns
// their paths.
func (ca *CA) Files(t testing.TB, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", cert.Certificate...), ca.write(t, name+"-key.pem", "PRIVATE KEY", kder)
}

// ClientTLS is a client's TLS config trusting ca and presenting certs.
func (ca *CA) ClientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool, Certificates: certs}
}

func (ca *CA) write(t testing.TB, name, typ string, ders ...[]byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, PEM(typ, ders...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// PEM encodes DER blocks of one type.
func PEM(typ string, ders ...[]byte) []byte {
	var b []byte
	for _, d := range ders {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: d})...)
	}
	return b
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
