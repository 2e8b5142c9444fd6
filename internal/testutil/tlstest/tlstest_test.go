package tlstest_test

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/tlstest"
)

// A handshake over a pipe: the server certificate verifies for 127.0.0.1
// against the CA, the client certificate against the server's CA; the
// other CA fails.
func TestPKI(t *testing.T) {
	p := tlstest.New(t)
	handshake := func(client *tls.Config) (clientErr, serverErr error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		srv := tls.Server(b, p.ServerConfig(t, true))
		done := make(chan error, 1)
		go func() { done <- srv.Handshake(); _ = b.Close() }()
		c := client.Clone()
		c.ServerName = "127.0.0.1"
		clientErr = tls.Client(a, c).Handshake()
		_ = a.Close()
		return clientErr, <-done
	}
	if ce, se := handshake(p.ClientConfig(t, true)); ce != nil || se != nil {
		t.Fatalf("right CA and client certificate: client %v, server %v", ce, se)
	}
	if _, se := handshake(p.ClientConfig(t, false)); se == nil {
		t.Fatal("the server accepted a client without a certificate")
	}
	wrong := p.ClientConfig(t, true)
	wrong.RootCAs = nil
	if ce, _ := handshake(wrong); ce == nil {
		t.Fatal("the client trusted the server without the test CA")
	} else if !errors.As(ce, new(*tls.CertificateVerificationError)) {
		t.Fatalf("the client refused the server for another reason than its certificate: %v", ce)
	}
}
