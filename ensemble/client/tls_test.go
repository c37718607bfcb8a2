package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
)

func TestTLSRefusedClassification(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unknown CA", fmt.Errorf("TLS handshake with x: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true},
		{"wrong name", fmt.Errorf("TLS handshake with x: %w", x509.HostnameError{Host: "x"}), true},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired}, true},
		{"alert from the server", fmt.Errorf("handshake with x: %w", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), true},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"server closed", fmt.Errorf("handshake with x: %w", errRefused), false},
		{"EOF", io.EOF, false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		if got := tlsRefused(tc.err); got != tc.want {
			t.Errorf("%s: tlsRefused(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
