// Package natstest runs an embedded nats-server with JetStream for a test:
// a free loopback port, file storage in t.TempDir(), shut down in
// t.Cleanup. Restart keeps the port and the store, like a real restart.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Server is one embedded nats-server: a launch.NATS that fails its test
// where launch returns an error.
type Server struct {
	*launch.NATS
	t testing.TB
}

// Option changes the server options before start.
type Option func(*server.Options)

// Start starts a JetStream-enabled server and registers its shutdown. It
// returns once the server accepts clients with JetStream enabled.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := launch.JetStreamOptions(t.TempDir())
	for _, f := range opts {
		f(&o)
	}
	s := &Server{NATS: launch.NewNATS(o), t: t}
	if err := s.NATS.Start(); err != nil {
		t.Fatalf("natstest: %v", err)
	}
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
