// Package launch starts what tests, benchmarks and the demo run against:
// redis-server and nats-server (a binary, or embedded in this process) on
// free loopback ports, and keyfleet's own binaries as child processes.
//
// It needs no testing.TB: Start functions return a handle and an error,
// and the caller stops what it started. The test helpers (redistest,
// natstest) are thin wrappers that fail the test instead and stop the
// server in t.Cleanup; kfbench and the demo use this package directly.
package launch

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago,
// picked at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range) where it can: a port from that
// range, which a listen on port 0 hands out, is the source port the
// kernel gives the next outgoing connections too, so one of the many
// connections of the tests running beside (another make test) could take
// it before the server meant for it listens. Below the range only another
// FreePort picks ports, at random among thousands.
func FreePort() (int, error) {
	if lo := ephemeralLow(); lo-freePortFloor >= 1000 {
		for range 20 {
			p := freePortFloor + rand.IntN(lo-freePortFloor)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("launch: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePortFloor is the lowest port FreePort picks: above the ports
// services register (well-known and most registered ones).
const freePortFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read: not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// FreeAddr is FreePort as 127.0.0.1:port: an address nothing listened on
// a moment ago (for a listener to come, or a refused connection).
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// Silent is a TCP server on loopback that accepts connections and never
// says a word: a server that hangs.
type Silent struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// StartSilent starts a Silent server on a free port.
func StartSilent() (*Silent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	s := &Silent{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// Addr is its host:port.
func (s *Silent) Addr() string { return s.ln.Addr().String() }

// Close stops listening and closes every connection it took.
func (s *Silent) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// Buffer keeps everything written to it; it is safe for concurrent use, so
// that a process's stdout and stderr can share one.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Reset forgets everything written so far.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// poll calls ready until it returns nil, stop reports a reason to give up,
// or ctx ends; the waits between calls grow from 1 ms to 50 ms.
func poll(ctx context.Context, ready func() error, stop func() error) error {
	backoff := time.Millisecond
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if serr := stop(); serr != nil {
			return serr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last try: %v)", context.Cause(ctx), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}
