// Package tlstest makes a throwaway PKI for a test: a CA, a server
// certificate for 127.0.0.1 and localhost, a client certificate, and an
// unrelated second CA (for the "wrong CA" case), written as PEM files into
// t.TempDir().
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI holds the paths of the PEM files.
type PKI struct {
	// CAFile is the CA that signed the server and client certificates.
	CAFile string
	// ServerCert and ServerKey: a server certificate for 127.0.0.1, ::1 and
	// localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey: a client certificate (CN "keyfleet-test").
	ClientCert, ClientKey string
	// OtherCAFile is a CA that signed nothing here: trusting it instead of
	// CAFile must fail verification.
	OtherCAFile string
	// OtherClientCert and OtherClientKey: a client certificate signed by
	// the other CA, which a server verifying against CAFile refuses.
	OtherClientCert, OtherClientKey string
}

// New generates the PKI. Keys are ECDSA P-256; certificates are valid from
// an hour ago for a day.
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{}
	write := func(name string, block *pem.Block) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ca, caKey := newCA(t, "keyfleet test CA")
	other, otherKey := newCA(t, "some other CA")
	p.CAFile = write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	p.OtherCAFile = write("other-ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: other.Raw})

	leaf := func(name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, server bool) (string, string) {
		tmpl := &x509.Certificate{
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		cert, key := newCert(t, name, tmpl, parent, parentKey)
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", &pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
			write(name+"-key.pem", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p.ServerCert, p.ServerKey = leaf("server", ca, caKey, true)
	p.ClientCert, p.ClientKey = leaf("client", ca, caKey, false)
	p.OtherClientCert, p.OtherClientKey = leaf("other-client", other, otherKey, false)
	return p
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

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	return newCert(t, name, &x509.Certificate{
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil, nil)
}

// newCert issues tmpl for a new key and CommonName name, valid from an hour
// ago for a day, signed by parent with parentKey (self-signed when parent
// is nil).
func newCert(t testing.TB, name string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// ServerConfig is a server-side TLS config with the server certificate;
// with verifyClients, client certificates signed by the CA are required.
func (p *PKI) ServerConfig(t testing.TB, verifyClients bool) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if verifyClients {
		c.ClientCAs = p.pool(t, p.CAFile)
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// ClientConfig is a client-side TLS config trusting the CA; withCert adds
// the client certificate.
func (p *PKI) ClientConfig(t testing.TB, withCert bool) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: p.pool(t, p.CAFile), MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

func (p *PKI) pool(t testing.TB, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", file)
	}
	return pool
}
