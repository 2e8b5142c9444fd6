package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// TLSFiles configure a TLS-only redis-server.
type TLSFiles struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // CAs of client certificates, and what the readiness check trusts
	// ClientCert and ClientKey, when set, are presented by the readiness
	// check (needed with AuthClients "yes").
	ClientCert, ClientKey string
	// AuthClients is --tls-auth-clients: "no" (the default here),
	// "optional" or "yes".
	AuthClients string
}

// StartTLS starts a redis-server that listens only for TLS (--port 0,
// --tls-port), and registers its stop with t.Cleanup. It fails the test
// with a clear message when the redis-server was built without TLS.
// Restart and StartAgain are not supported on it.
func StartTLS(t testing.TB, files TLSFiles, opts ...Option) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	tc, err := files.clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	s.startOnFreePort("redistest: start redis-server with TLS", func(port int) error { return s.startTLSOn(port, files, tc) })
	return s
}

func (f TLSFiles) clientConfig() (*tls.Config, error) {
	b, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", f.CAFile)
	}
	tc := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if f.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (s *Server) startTLSOn(port int, files TLSFiles, tc *tls.Config) error {
	auth := files.AuthClients
	if auth == "" {
		auth = "no"
	}
	return s.launch(port, []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", files.CertFile,
		"--tls-key-file", files.KeyFile,
		"--tls-ca-cert-file", files.CAFile,
		"--tls-auth-clients", auth,
	}, tc, "TLS port", " (built without TLS support?)")
}

// TLSURL is a rediss:// URL for database 0, with the --requirepass
// password if there is one.
func (s *Server) TLSURL() string {
	if pw := s.password(); pw != "" {
		return fmt.Sprintf("rediss://:%s@%s/0", pw, s.Addr())
	}
	return fmt.Sprintf("rediss://%s/0", s.Addr())
}
