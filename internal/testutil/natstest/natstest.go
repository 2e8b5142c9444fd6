// Package natstest runs an embedded nats-server with JetStream for a test:
// a free loopback port, file storage in t.TempDir(), shut down in
// t.Cleanup. Restart keeps the port and the store, like a real restart.
// The servers are launch's; this package fails the test instead of
// returning errors.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Server is one embedded nats-server.
type Server struct {
	t testing.TB
	*launch.NATS
}

// Option changes the server options before start.
type Option func(*server.Options)

// Start starts a JetStream-enabled server and registers its shutdown.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := launch.JetStreamOptions(t.TempDir())
	for _, f := range opts {
		f(&o)
	}
	n, err := launch.StartNATS(o)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	s := &Server{t: t, NATS: n}
	t.Cleanup(s.Shutdown)
	return s
}

// Restart shuts the server down and starts it again on the same port with
// the same store directory: file-stored streams and consumers survive.
func (s *Server) Restart() {
	s.t.Helper()
	s.Shutdown()
	s.StartAgain()
}

// StartAgain starts a server that was shut down, on its old port and store.
func (s *Server) StartAgain() {
	s.t.Helper()
	if err := s.NATS.StartAgain(); err != nil {
		s.t.Fatalf("natstest: %v", err)
	}
}
