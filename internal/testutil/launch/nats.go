package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// JetStreamOptions are the options of a quiet JetStream server on a free
// loopback port, storing in storeDir.
func JetStreamOptions(storeDir string) server.Options {
	return server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
	}
}

// NATS is a nats-server embedded in this process. After its first start
// it keeps its port, so that a restart comes back on it (with its store:
// file-stored streams survive).
type NATS struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
}

// NewNATS returns a server with options o, not started yet (Start); the
// nodes of a cluster start together.
func NewNATS(o server.Options) *NATS { return &NATS{opts: o} }

// StartNATS starts an embedded server with options o (Port -1: a free
// port) and waits until it accepts connections.
func StartNATS(o server.Options) (*NATS, error) {
	n := NewNATS(o)
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// Start starts the server and waits until it accepts connections.
func (n *NATS) Start() error {
	n.mu.Lock()
	o := n.opts
	n.mu.Unlock()
	srv, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("launch: nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("launch: nats-server not ready for connections within 10s")
	}
	n.mu.Lock()
	n.srv = srv
	n.opts.Port = srv.Addr().(*net.TCPAddr).Port
	n.mu.Unlock()
	return nil
}

// StartAgain starts a server that was shut down, on its old port and
// store, retrying for up to 10s while the old listener lingers.
func (n *NATS) StartAgain() error {
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err = n.Start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("launch: restart nats-server on port %d: %w", n.Port(), err)
}

// Shutdown stops the server and waits until it is down. Safe to call
// twice.
func (n *NATS) Shutdown() {
	n.mu.Lock()
	srv := n.srv
	n.srv = nil
	n.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Server is the running server (nil while stopped).
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Options are the server's options (Port: the one it got).
func (n *NATS) Options() server.Options {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.opts
}

// Port is the client port.
func (n *NATS) Port() int { return n.Options().Port }

// URL is the nats:// URL clients use.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port()) }

// NATSProcessOptions say how to run a nats-server binary with JetStream on
// loopback.
type NATSProcessOptions struct {
	// Bin is the nats-server binary. Required.
	Bin string
	// StoreDir is JetStream's store. Required.
	StoreDir string
	// LogFile is the server's log. Required.
	LogFile string
	// Monitor also serves the monitoring endpoints (NATSProcess.Monitor).
	Monitor bool
	// Profile also serves Go's pprof (NATSProcess.Profile).
	Profile bool
	// OwnGroup: see Options.
	OwnGroup bool
}

// NATSProcess is a nats-server binary running as a child process.
type NATSProcess struct {
	*Proc
	// URL is the nats:// URL clients use.
	URL string
	// Monitor and Profile are the host:port of the monitoring and pprof
	// listeners, when asked for.
	Monitor, Profile string
}

// StartNATSProcess starts a nats-server binary on free ports and waits
// until it accepts a connection.
func StartNATSProcess(ctx context.Context, o NATSProcessOptions) (*NATSProcess, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	n := &NATSProcess{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", o.StoreDir, "-l", o.LogFile}
	for _, l := range []struct {
		want bool
		flag string
		addr *string
	}{{o.Monitor, "-m", &n.Monitor}, {o.Profile, "--profile", &n.Profile}} {
		if !l.want {
			continue
		}
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		args = append(args, l.flag, strconv.Itoa(p))
		*l.addr = fmt.Sprintf("127.0.0.1:%d", p)
	}
	if n.Proc, err = Start(filepath.Base(o.Bin), o.Bin, args, Options{OwnGroup: o.OwnGroup}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = poll(wctx, func() error {
		nc, err := nats.Connect(n.URL, nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
		}
		return err
	}, func() error {
		if n.Exited() {
			return errors.New("exited during start-up")
		}
		return nil
	})
	if err != nil {
		n.Kill()
		return nil, fmt.Errorf("launch: nats-server on port %d: %w (log: %s)", port, err, o.LogFile)
	}
	return n, nil
}
