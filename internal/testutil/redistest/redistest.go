// Package redistest starts a real redis-server for a test: on a free
// loopback port, with a private directory and no persistence, stopped in
// t.Cleanup. A missing redis-server fails the test with a message that says
// how to install one; tests never skip for want of Redis.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string

	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Option adds to the redis-server command line.
type Option func(*Server)

// WithArgs passes extra redis-server arguments, e.g. "--requirepass", "pw".
func WithArgs(args ...string) Option {
	return func(s *Server) { s.args = append(s.args, args...) }
}

// Binary returns the path of redis-server (REDIS_SERVER_BIN or PATH) or an
// error that says how to get one.
func Binary() (string, error) {
	if b := os.Getenv("REDIS_SERVER_BIN"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server is not installed (not in PATH, REDIS_SERVER_BIN unset): " +
			"the tests need a real Redis; install it with `apt-get install -y redis-server` (Debian/Ubuntu) " +
			"or `brew install redis` (macOS), or run `bash .ci/run`, which installs it")
	}
	return b, nil
}

// Start starts a redis-server and registers its stop with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	s.startOnFreePort("redistest: start redis-server", s.startOn)
	return s
}

// startOnFreePort tries start on up to 5 free ports and registers the
// server's stop with t.Cleanup; it fails the test after the last try.
func (s *Server) startOnFreePort(what string, start func(port int) error) {
	s.t.Helper()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			s.t.Fatalf("redistest: free port: %v", err)
		}
		if lastErr = start(port); lastErr == nil {
			s.t.Cleanup(s.Stop)
			return
		}
	}
	s.t.Fatalf("%s: %v", what, lastErr)
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) startOn(port int) error {
	return s.launch(port, []string{"--port", strconv.Itoa(port)}, nil, "port", "")
}

// launch starts redis-server listening as listen says (port flags), with
// the common flags and the test's extra args, and waits until a client
// (with tc for TLS) gets an answer on port. what and exitHint shape the
// error: "redis-server on <what> <port>: exited during start-up<hint>".
func (s *Server) launch(port int, listen []string, tc *tls.Config, what, exitHint string) error {
	args := append(append(listen,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	), s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitReady(ctx, port, s.password(), tc, done, exitHint); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on %s %d: %w (log: %s)", what, port, err, s.logTail())
	}
	s.mu.Lock()
	s.port, s.cmd, s.done = port, cmd, done
	s.mu.Unlock()
	return nil
}

func (s *Server) password() string {
	for i, a := range s.args {
		if a == "--requirepass" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return ""
}

// waitReady pings until the server answers, the process exits or ctx ends.
func waitReady(ctx context.Context, port int, password string, tc *tls.Config, exited <-chan struct{}, exitHint string) error {
	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: password, TLSConfig: tc,
		MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1,
	})
	defer c.Close()
	backoff := time.Millisecond
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited during start-up" + exitHint)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last ping: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// Port is the server's TCP port.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Addr is host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port()) }

// URL is a redis:// URL for database 0.
func (s *Server) URL() string {
	if pw := s.password(); pw != "" {
		return fmt.Sprintf("redis://:%s@%s/0", pw, s.Addr())
	}
	return fmt.Sprintf("redis://%s/0", s.Addr())
}

// Client returns a client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.password()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Restart stops the server and starts a new one on the same port. There is
// no persistence, so every key is gone: the "Redis restarted, state lost"
// case.
func (s *Server) Restart() {
	s.t.Helper()
	port := s.Port()
	s.Stop()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err = s.startOn(port); err == nil {
			return
		}
		if !strings.Contains(err.Error(), "in use") && !strings.Contains(s.logTail(), "in use") {
			break
		}
	}
	s.t.Fatalf("redistest: restart on port %d: %v", port, err)
}

// Start starts a stopped server again on its old port (after Stop).
func (s *Server) StartAgain() {
	s.t.Helper()
	if err := s.startOn(s.port); err != nil {
		s.t.Fatalf("redistest: start again on port %d: %v", s.port, err)
	}
}

var nameSafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// UniqueName returns a fresh name for this test (a pool name, a key
// prefix): the test's name plus random hex, so tests sharing a server never
// see each other's keys.
func UniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := nameSafe.ReplaceAllString(t.Name(), "-")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return n + "-" + hex.EncodeToString(b[:])
}

// ReadLines is a tiny helper for tests that scan a server's log.
func (s *Server) LogLines() []string {
	f, err := os.Open(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
