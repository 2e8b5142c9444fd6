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
// it keeps its ports, so that a restart comes back on them (with its
// store: file-stored streams survive).
type NATS struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
	// hold keeps the client port of a server not started yet bound (see
	// Reserve), so that nothing else takes it; Start lets it go.
	hold net.Listener
}

// NATSReadyTimeout bounds the wait for a started server to accept clients.
const NATSReadyTimeout = 30 * time.Second

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

// Reserve picks the client port of a server that starts later and keeps
// it bound until then, so that its URL can be handed out now.
func (n *NATS) Reserve() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := net.Listen("tcp", fmt.Sprintf("%s:0", n.opts.Host))
	if err != nil {
		return fmt.Errorf("launch: reserve a client port: %w", err)
	}
	n.hold = l
	n.opts.Port = l.Addr().(*net.TCPAddr).Port
	return nil
}

// release lets a reserved client port go.
func (n *NATS) release() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hold != nil {
		_ = n.hold.Close()
		n.hold = nil
	}
}

// Start starts the server and waits until it accepts connections, with
// JetStream enabled when its options ask for it. Its client and cluster
// ports are kept for later starts. A port of its own (a reserved one, or
// one it had before) that something else holds for a moment is tried
// again for up to samePortWait. A server that fails to start says what it
// logged (it runs with NoLog: nothing is printed).
func (n *NATS) Start() error {
	deadline := time.Now().Add(samePortWait)
	for {
		err := n.start()
		if !errors.Is(err, ErrPortTaken) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *NATS) start() error {
	n.mu.Lock()
	o := n.opts
	n.mu.Unlock()
	srv, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("launch: nats-server %s: %w", o.ServerName, err)
	}
	n.release()
	errs := &errLog{}
	srv.SetLogger(errs, false, false)
	go srv.Start()
	// Ready in steps, so that a listen that failed (its error logged)
	// ends the wait at once.
	for ready, until := false, time.Now().Add(NATSReadyTimeout); !ready; {
		if ready = srv.ReadyForConnections(50 * time.Millisecond); ready {
			break
		}
		if portTakenIn(errs.String()) {
			srv.Shutdown()
			return fmt.Errorf("%w: nats-server %s on port %d: %s", ErrPortTaken, o.ServerName, o.Port, errs)
		}
		if time.Now().After(until) {
			srv.Shutdown()
			return fmt.Errorf("launch: nats-server %s not ready for connections within %s: %s", o.ServerName, NATSReadyTimeout, errs)
		}
	}
	// JetStream is enabled before the client listener opens; say so if a
	// server ever returns without it. (A cluster node has more to do
	// before JetStream takes requests: natstest.Cluster waits for that.)
	if o.JetStream && !srv.JetStreamEnabled() {
		srv.Shutdown()
		return fmt.Errorf("launch: nats-server %s ready for connections without JetStream enabled", o.ServerName)
	}
	n.mu.Lock()
	n.srv = srv
	n.opts.Port = srv.Addr().(*net.TCPAddr).Port
	if a := srv.ClusterAddr(); a != nil {
		n.opts.Cluster.Port = a.Port
	}
	n.mu.Unlock()
	return nil
}

// StartAgain starts a server that was shut down, on its old ports and
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

// Shutdown stops the server and waits until it is down; a reserved port
// is let go. Safe to call twice.
func (n *NATS) Shutdown() {
	n.release()
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
// until it accepts a connection; when a port it picked was taken before
// the server listened, it starts again on others.
func StartNATSProcess(ctx context.Context, o NATSProcessOptions) (*NATSProcess, error) {
	var n *NATSProcess
	err := onFreePort(func(port int) error {
		var err error
		n, err = startNATSProcess(ctx, o, port)
		return err
	})
	return n, err
}

func startNATSProcess(ctx context.Context, o NATSProcessOptions, port int) (*NATSProcess, error) {
	var err error
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
		if portTakenIn(fileTail(o.LogFile, 4096)) {
			err = fmt.Errorf("%w: %w", ErrPortTaken, err)
		}
		return nil, fmt.Errorf("launch: nats-server on port %d: %w (log: %s)", port, err, o.LogFile)
	}
	return n, nil
}
