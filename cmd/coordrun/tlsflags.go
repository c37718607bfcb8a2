package main

// TLS flags. The server has two sets: the client port (server certificate,
// optionally a CA for client certificates) and the peer port (mutual TLS,
// one CA for every member). Every client command shares one set: a CA to
// verify members with, an optional client certificate, and the name to
// verify. A problem with a file is a usage error (exit 64) naming it.

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

// stringGetter is the part of viper the TLS helpers read.
type stringGetter interface {
	GetString(key string) string
}

func addServerTLSFlags(f *pflag.FlagSet) {
	f.String("tls-cert", "", "PEM certificate (chain) for the client port; turns on TLS there, for sessions and four-letter words alike")
	f.String("tls-key", "", "PEM private key of --tls-cert")
	f.String("tls-client-ca", "", "PEM CA bundle: require client certificates signed by it on the client port")
	f.String("peer-tls-cert", "", "PEM certificate of this member for mutual TLS between members (with --peer-tls-key, --peer-tls-ca)")
	f.String("peer-tls-key", "", "PEM private key of --peer-tls-cert")
	f.String("peer-tls-ca", "", "PEM CA bundle that signed every member's --peer-tls-cert")
}

// serverTLS reads the server's TLS flags; nil configs mean plaintext.
func serverTLS(v stringGetter) (clientPort, peerPort *tls.Config, err error) {
	cert, key, clientCA := v.GetString("tls-cert"), v.GetString("tls-key"), v.GetString("tls-client-ca")
	switch {
	case cert != "" || key != "":
		kp, err := loadKeyPair("tls-cert", cert, "tls-key", key)
		if err != nil {
			return nil, nil, err
		}
		clientPort = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
		if clientCA != "" {
			if clientPort.ClientCAs, err = loadCAs("tls-client-ca", clientCA); err != nil {
				return nil, nil, err
			}
			clientPort.ClientAuth = tls.RequireAndVerifyClientCert
		}
	case clientCA != "":
		return nil, nil, usageError{errors.New("--tls-client-ca needs --tls-cert and --tls-key")}
	}

	cert, key, ca := v.GetString("peer-tls-cert"), v.GetString("peer-tls-key"), v.GetString("peer-tls-ca")
	if cert == "" && key == "" && ca == "" {
		return clientPort, nil, nil
	}
	if ca == "" {
		return nil, nil, usageError{errors.New("--peer-tls-cert and --peer-tls-key need --peer-tls-ca (the CA of every member's peer certificate)")}
	}
	if cert == "" && key == "" {
		return nil, nil, usageError{errors.New("--peer-tls-ca needs --peer-tls-cert and --peer-tls-key (this member's certificate)")}
	}
	kp, err := loadKeyPair("peer-tls-cert", cert, "peer-tls-key", key)
	if err != nil {
		return nil, nil, err
	}
	pool, err := loadCAs("peer-tls-ca", ca)
	if err != nil {
		return nil, nil, err
	}
	peerPort = &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS13}
	return clientPort, peerPort, nil
}

func addClientTLSFlags(f *pflag.FlagSet) {
	f.String("tls-ca", "", "PEM CA bundle to verify the servers with; turns on TLS (without it, TLS flags verify against the system's roots)")
	f.String("tls-cert", "", "PEM client certificate to present (with --tls-key); turns on TLS")
	f.String("tls-key", "", "PEM private key of --tls-cert")
	f.String("tls-server-name", "", "name to verify in every server's certificate (default: the host of each --servers address); turns on TLS")
}

// clientTLS reads the client TLS flags; nil means plaintext.
func clientTLS(v stringGetter) (*tls.Config, error) {
	ca, cert, key, name := v.GetString("tls-ca"), v.GetString("tls-cert"), v.GetString("tls-key"), v.GetString("tls-server-name")
	if ca == "" && cert == "" && key == "" && name == "" {
		return nil, nil
	}
	c := &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pool, err := loadCAs("tls-ca", ca)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if cert != "" || key != "" {
		kp, err := loadKeyPair("tls-cert", cert, "tls-key", key)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// loadKeyPair loads a certificate chain and its private key, blaming the
// right file for each problem: unreadable, no PEM, unparsable, or a key
// that does not belong to the certificate.
func loadKeyPair(certFlag, certFile, keyFlag, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, usageError{fmt.Errorf("--%s and --%s go together", certFlag, keyFlag)}
	}
	chain, err := readCerts(certFlag, certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, usageError{fmt.Errorf("--%s: %w", keyFlag, err)}
	}
	key, err := parseKey(b)
	if err != nil {
		return tls.Certificate{}, usageError{fmt.Errorf("--%s %s: %w", keyFlag, keyFile, err)}
	}
	pub, ok := chain[0].PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return tls.Certificate{}, usageError{fmt.Errorf("--%s %s is not the key of the certificate in --%s %s", keyFlag, keyFile, certFlag, certFile)}
	}
	out := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		out.Certificate = append(out.Certificate, c.Raw)
	}
	return out, nil
}

// loadCAs reads a PEM bundle of CA certificates into a pool.
func loadCAs(flag, file string) (*x509.CertPool, error) {
	certs, err := readCerts(flag, file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// readCerts reads every CERTIFICATE block of a PEM file; there must be one.
func readCerts(flag, file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, usageError{fmt.Errorf("--%s %s: certificate %d: %w", flag, file, len(certs)+1, err)}
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, usageError{fmt.Errorf("--%s %s: no PEM certificate in the file", flag, file)}
	}
	return certs, nil
}

// parseKey finds the private key in a PEM file: PKCS#8, PKCS#1 (RSA) or
// SEC 1 (EC), as openssl, cfssl and step write them.
func parseKey(b []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM private key in the file")
		}
		var key any
		var err error
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("the private key is encrypted; coordrun needs it unencrypted")
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("private key of type %T cannot sign", key)
		}
		return s, nil
	}
}
