// Package natstest runs an embedded nats-server with JetStream for a test:
// a free loopback port, file storage in t.TempDir(), shut down in
// t.Cleanup. Restart keeps the port and the store, like a real restart.
package natstest

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Server is one embedded nats-server.
type Server struct {
	t    testing.TB
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
	// hold keeps the client port of a server not started yet bound, so
	// that nothing else takes it; start lets it go.
	hold net.Listener
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
	s := &Server{t: t, opts: o}
	if err := s.start(); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	// Pin the chosen port so that a restart comes back on it.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Shutdown)
	return s
}

// reservePort picks the client port of a server that starts later and
// keeps it bound until then.
func (s *Server) reservePort() error {
	l, err := net.Listen("tcp", fmt.Sprintf("%s:0", s.opts.Host))
	if err != nil {
		return fmt.Errorf("reserve a client port: %w", err)
	}
	s.hold = l
	s.opts.Port = l.Addr().(*net.TCPAddr).Port
	return nil
}

func (s *Server) start() error {
	o := s.opts
	srv, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("new server: %w", err)
	}
	s.release()
	errs := &errLog{}
	srv.SetLogger(errs, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("server %s not ready for connections within %s: %s", o.ServerName, readyTimeout, errs)
	}
	// JetStream is enabled before the client listener opens; say so if a
	// server ever returns without it. (A cluster node has more to do
	// before JetStream takes requests: Cluster waits for that.)
	if o.JetStream && !srv.JetStreamEnabled() {
		srv.Shutdown()
		return fmt.Errorf("server %s ready for connections without JetStream enabled", o.ServerName)
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	return nil
}

// URL is the nats:// URL clients use.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port)
}

// Port is the client port.
func (s *Server) Port() int { return s.opts.Port }

// Server returns the running server (nil while stopped).
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// release lets a reserved client port go.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		_ = s.hold.Close()
		s.hold = nil
	}
}

// Shutdown stops the server and waits until it is down. Safe to call twice.
func (s *Server) Shutdown() {
	s.release()
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	srv.WaitForShutdown()
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
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // the old listener may linger for a moment
	}
	s.t.Fatalf("natstest: restart on port %d: %v", s.opts.Port, err)
}
