package launch

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisBinary returns the path of redis-server (REDIS_SERVER_BIN or PATH)
// or an error that says how to get one.
func RedisBinary() (string, error) {
	return binary("redis-server", "REDIS_SERVER_BIN", "redis-server")
}

// RedisCLIBinary returns the path of redis-cli (REDIS_CLI_BIN or PATH) or
// an error that says how to get one.
func RedisCLIBinary() (string, error) {
	return binary("redis-cli", "REDIS_CLI_BIN", "redis-tools")
}

// binary finds name through the variable env, else PATH.
func binary(name, env, debPackage string) (string, error) {
	if b := os.Getenv(env); b != "" {
		return b, nil
	}
	b, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (not in PATH, %s unset); the tests and benchmarks need a real one: install it with "+
			"`apt-get install -y %s` (Debian/Ubuntu) or `brew install redis` (macOS), "+
			"or run `bash scripts/ensure-redis.sh`", name, env, debPackage)
	}
	return b, nil
}

// RedisOptions say how to run a redis-server: on loopback, with no
// persistence, its log in Dir.
type RedisOptions struct {
	// Bin is the redis-server binary; "": RedisBinary.
	Bin string
	// Dir is the server's directory, for its log and nothing else.
	// Required.
	Dir string
	// LogFile is the server's log; "": Dir/redis.log.
	LogFile string
	// Port to listen on; 0: a free port (a few are tried).
	Port int
	// Args are more redis-server arguments, e.g. "--requirepass", "pw".
	Args []string
	// TLS, when set, makes the server listen for TLS only.
	TLS *RedisTLS
	// OwnGroup: see Options.
	OwnGroup bool
}

// RedisTLS configures a TLS-only redis-server.
type RedisTLS struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // CAs of client certificates, and what the readiness check trusts
	// ClientCert and ClientKey, when set, are presented by the readiness
	// check (needed with AuthClients "yes").
	ClientCert, ClientKey string
	// AuthClients is --tls-auth-clients: "no" (the default here),
	// "optional" or "yes".
	AuthClients string
}

// clientConfig is what the readiness check connects with.
func (t *RedisTLS) clientConfig() (*tls.Config, error) {
	b, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificate in %s", t.CAFile)
	}
	tc := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if t.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Redis is a redis-server process.
type Redis struct {
	o  RedisOptions
	tc *tls.Config // the readiness check's, with TLS

	mu   sync.Mutex
	port int
	proc *Proc
}

// StartRedis starts a redis-server and waits until it answers a PING.
func StartRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	if o.Bin == "" {
		b, err := RedisBinary()
		if err != nil {
			return nil, err
		}
		o.Bin = b
	}
	if o.LogFile == "" {
		o.LogFile = filepath.Join(o.Dir, "redis.log")
	}
	r := &Redis{o: o}
	if o.TLS != nil {
		tc, err := o.TLS.clientConfig()
		if err != nil {
			return nil, fmt.Errorf("launch: redis-server TLS: %w", err)
		}
		r.tc = tc
	}
	if o.Port != 0 {
		return r, r.StartOn(ctx, o.Port)
	}
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if lastErr = r.StartOn(ctx, port); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

// StartOn starts the server (stopped, or never started) on port and waits
// until it answers.
func (r *Redis) StartOn(ctx context.Context, port int) error {
	listen := []string{"--port", strconv.Itoa(port)}
	what, exitHint := "port", ""
	if t := r.o.TLS; t != nil {
		listen = []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile,
			"--tls-auth-clients", cmp.Or(t.AuthClients, "no")}
		what, exitHint = "TLS port", " (built without TLS support?)"
	}
	args := append(append(listen,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.o.Dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", r.o.LogFile,
	), r.o.Args...)
	p, err := Start("redis-server", r.o.Bin, args, Options{OwnGroup: r.o.OwnGroup})
	if err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: r.Password(), TLSConfig: r.tc,
		MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1,
	})
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = poll(wctx, func() error { return c.Ping(wctx).Err() }, func() error {
		if p.Exited() {
			return errors.New("exited during start-up" + exitHint)
		}
		return nil
	})
	if err != nil {
		p.Kill()
		return fmt.Errorf("redis-server on %s %d: %w (log: %s)", what, port, err, r.LogTail(5))
	}
	r.mu.Lock()
	r.port, r.proc = port, p
	r.mu.Unlock()
	return nil
}

// Password is the --requirepass argument, if any.
func (r *Redis) Password() string {
	for i, a := range r.o.Args {
		if a == "--requirepass" && i+1 < len(r.o.Args) {
			return r.o.Args[i+1]
		}
	}
	return ""
}

// Port is the server's TCP port (the last it listened on).
func (r *Redis) Port() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.port
}

// Addr is 127.0.0.1:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.Port()) }

// URL is a redis:// URL (rediss:// with TLS) for database 0, with the
// password if there is one.
func (r *Redis) URL() string {
	scheme := "redis"
	if r.o.TLS != nil {
		scheme = "rediss"
	}
	if pw := r.Password(); pw != "" {
		return fmt.Sprintf("%s://:%s@%s/0", scheme, pw, r.Addr())
	}
	return fmt.Sprintf("%s://%s/0", scheme, r.Addr())
}

// Proc is the running process (nil once stopped).
func (r *Redis) Proc() *Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (r *Redis) Stop() {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Restart stops the server and starts a new one on the same port, retrying
// while the port is still held. There is no persistence: every key is gone.
func (r *Redis) Restart(ctx context.Context) error {
	port := r.Port()
	r.Stop()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err = r.StartOn(ctx, port); err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return fmt.Errorf("launch: restart redis-server on port %d: %w", port, err)
}

// LogFile is the server's log.
func (r *Redis) LogFile() string { return r.o.LogFile }

// LogTail is the last n lines of the log, joined with " | ", for errors.
func (r *Redis) LogTail(n int) string {
	b, err := os.ReadFile(r.o.LogFile)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
