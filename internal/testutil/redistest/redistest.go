// Package redistest starts a real redis-server for a test: on a free
// loopback port, with a private directory and no persistence, stopped in
// t.Cleanup. A missing redis-server fails the test with a message that says
// how to install one; tests never skip for want of Redis. The servers are
// launch's; this package fails the test instead of returning errors.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Server is one redis-server process.
type Server struct {
	t testing.TB
	r *launch.Redis
}

// Option adds to the redis-server command line.
type Option func(*launch.RedisOptions)

// WithArgs passes extra redis-server arguments, e.g. "--requirepass", "pw".
func WithArgs(args ...string) Option {
	return func(o *launch.RedisOptions) { o.Args = append(o.Args, args...) }
}

// Binary returns the path of redis-server (REDIS_SERVER_BIN or PATH) or an
// error that says how to get one.
func Binary() (string, error) { return launch.RedisBinary() }

// Start starts a redis-server and registers its stop with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return start(t, "redistest: start redis-server", launch.RedisOptions{}, opts)
}

// start starts a server with o and opts on a free port, failing the test
// with what when it cannot.
func start(t testing.TB, what string, o launch.RedisOptions, opts []Option) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	o.Bin, o.Dir = bin, t.TempDir()
	for _, opt := range opts {
		opt(&o)
	}
	r, err := launch.StartRedis(context.Background(), o)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	s := &Server{t: t, r: r}
	t.Cleanup(s.Stop)
	return s
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) { return launch.FreePort() }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.r.Port() }

// Addr is host:port.
func (s *Server) Addr() string { return s.r.Addr() }

// URL is a redis:// URL for database 0.
func (s *Server) URL() string {
	if pw := s.r.Password(); pw != "" {
		return fmt.Sprintf("redis://:%s@%s/0", pw, s.Addr())
	}
	return fmt.Sprintf("redis://%s/0", s.Addr())
}

// Client returns a client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.r.Password()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() { s.r.Stop() }

// Restart stops the server and starts a new one on the same port. There is
// no persistence, so every key is gone: the "Redis restarted, state lost"
// case.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.r.Restart(context.Background()); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// StartAgain starts a stopped server again on its old port (after Stop).
func (s *Server) StartAgain() {
	s.t.Helper()
	if err := s.r.StartOn(context.Background(), s.Port()); err != nil {
		s.t.Fatalf("redistest: start again on port %d: %v", s.Port(), err)
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

// LogLines returns the lines of the server's log, for tests that scan it.
func (s *Server) LogLines() []string {
	f, err := os.Open(s.r.LogFile())
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
