package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// startNATS runs an embedded JetStream server unless KEYFLEET_NATS_URL is
// set.
func (d *demo) startNATS() (string, error) {
	if u := os.Getenv("KEYFLEET_NATS_URL"); u != "" {
		return u, nil
	}
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(d.dir, "nats"), NoLog: true, NoSigs: true,
	}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		return "", fmt.Errorf("NATS: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return "", errors.New("NATS did not start within 10s")
	}
	d.onCleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return "nats://" + s.Addr().String(), nil
}

// startRedis runs a redis-server on a free port unless KEYFLEET_REDIS_URL
// is set.
func (d *demo) startRedis(ctx context.Context) (string, error) {
	if u := os.Getenv("KEYFLEET_REDIS_URL"); u != "" {
		return u, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server is not installed: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis) or set KEYFLEET_REDIS_URL to a running Redis")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := filepath.Join(d.dir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("redis-server: %w", err)
	}
	d.onCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("redis-server on port %d did not answer within 10s (log: %s)", port, filepath.Join(dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return url, nil
}

// startAPI serves the stand-in API on a free loopback port.
func (d *demo) startAPI() (string, *fakeapi.Server, error) {
	keys := make([]fakeapi.Key, 0, len(demoKeys))
	for _, k := range demoKeys {
		if k.apiRate.N > 0 {
			keys = append(keys, fakeapi.Key{Secret: k.secret, Rate: k.apiRate, Concurrency: k.apiConcurrency})
		}
	}
	api, err := fakeapi.New(fakeapi.Config{Keys: keys, Latency: 60 * time.Millisecond})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	d.onCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + l.Addr().String(), api, nil
}
