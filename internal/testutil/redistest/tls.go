package redistest

import (
	"fmt"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// TLSFiles configure a TLS-only redis-server.
type TLSFiles = launch.RedisTLS

// StartTLS starts a redis-server that listens only for TLS (--port 0,
// --tls-port), and registers its stop with t.Cleanup. It fails the test
// with a clear message when the redis-server was built without TLS.
// Restart and StartAgain are not supported on it.
func StartTLS(t testing.TB, files TLSFiles, opts ...Option) *Server {
	t.Helper()
	return start(t, "redistest: start redis-server with TLS", launch.RedisOptions{TLS: &files}, opts)
}

// TLSURL is a rediss:// URL for database 0, with the --requirepass
// password if there is one.
func (s *Server) TLSURL() string {
	if pw := s.r.Password(); pw != "" {
		return fmt.Sprintf("rediss://:%s@%s/0", pw, s.Addr())
	}
	return fmt.Sprintf("rediss://%s/0", s.Addr())
}
