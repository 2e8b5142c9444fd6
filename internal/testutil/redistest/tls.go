package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		if lastErr = s.startTLSOn(port, files, tc); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: start redis-server with TLS: %v", lastErr)
	return nil
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
	args := append([]string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", files.CertFile,
		"--tls-key-file", files.KeyFile,
		"--tls-ca-cert-file", files.CAFile,
		"--tls-auth-clients", auth,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: s.password(), TLSConfig: tc,
		MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1,
	})
	defer c.Close()
	backoff := time.Millisecond
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			break
		}
		var failure error
		select {
		case <-done:
			failure = errors.New("exited during start-up (built without TLS support?)")
		case <-ctx.Done():
			failure = fmt.Errorf("not ready: %w (last ping: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		if failure != nil {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on TLS port %d: %w (log: %s)", port, failure, s.logTail())
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
	s.mu.Lock()
	s.port, s.cmd, s.done = port, cmd, done
	s.mu.Unlock()
	return nil
}

// TLSURL is a rediss:// URL for database 0, with the --requirepass
// password if there is one.
func (s *Server) TLSURL() string {
	if pw := s.password(); pw != "" {
		return fmt.Sprintf("rediss://:%s@%s/0", pw, s.Addr())
	}
	return fmt.Sprintf("rediss://%s/0", s.Addr())
}
