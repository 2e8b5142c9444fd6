// Package connect opens the NATS and Redis connections described by the
// configuration: reconnecting forever once up, a clear error (naming the
// server, never a password) when a server cannot be reached at start.
package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// Redact hides any password or token in a server URL or a list of URLs
// (see secret.RedactURL).
func Redact(raw string) string { return secret.RedactURL(raw) }

// NATSHooks are called on connection events (all optional).
type NATSHooks struct {
	Disconnected func(error)
	Reconnected  func()
}

// NATS connects to NATS. Once connected it reconnects forever; if the first
// connection fails the error names the server and has exit code 3.
func NATS(cfg config.NATS, name string, log *zap.Logger, hooks NATSHooks) (*nats.Conn, error) {
	if log == nil {
		log = zap.NewNop()
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(8 << 20),
		nats.PingInterval(10 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // our own Close
			}
			log.Warn("NATS disconnected", zap.Error(err))
			if hooks.Disconnected != nil {
				hooks.Disconnected(err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", zap.String("server", Redact(c.ConnectedUrl())))
			if hooks.Reconnected != nil {
				hooks.Reconnected()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("NATS async error", zap.String("subject", subj), zap.Error(err))
		}),
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	}
	if !cfg.TLS.IsZero() {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return nil, exitcode.With(exitcode.Usage, fmt.Errorf("nats.tls: %w", err))
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, exitcode.With(exitcode.Unreachable, fmt.Errorf("cannot connect to NATS at %s: %w", Redact(cfg.URL), err))
	}
	return nc, nil
}

// Redis returns a Redis client (a cluster client when cfg.Cluster) and
// checks that the server answers within timeout; otherwise the error names
// the server and has exit code 3.
func Redis(ctx context.Context, cfg config.Redis, poolSize int, timeout time.Duration) (redis.UniversalClient, error) {
	rdb, err := RedisClient(cfg, poolSize, timeout)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		code := exitcode.Unreachable
		if strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "NOPERM") {
			err = fmt.Errorf("authentication failed: %w", err)
		}
		return nil, exitcode.With(code, fmt.Errorf("cannot reach Redis at %s: %w", Redact(cfg.URL), err))
	}
	return rdb, nil
}

// RedisClient is Redis without the ping: it makes no connection until the
// client is first used. Its errors are configuration errors (exit code 2).
func RedisClient(cfg config.Redis, poolSize int, timeout time.Duration) (redis.UniversalClient, error) {
	var tc *tls.Config
	if !cfg.TLS.IsZero() {
		var err error
		if tc, err = tlsConfig(cfg.TLS); err != nil {
			return nil, exitcode.With(exitcode.Usage, fmt.Errorf("redis.tls: %w", err))
		}
	}
	set := redisSettings{url: cfg.URL, tls: tc, poolSize: poolSize, dialTimeout: timeout}
	var rdb redis.UniversalClient
	if cfg.Cluster {
		o, err := redis.ParseClusterURL(clusterURL(cfg.URL))
		if err != nil {
			return nil, exitcode.With(exitcode.Usage, fmt.Errorf("redis.url %s: %w", Redact(cfg.URL), err))
		}
		set.apply(&o.TLSConfig, &o.PoolSize, &o.DialTimeout, &o.Protocol, &o.ContextTimeoutEnabled)
		rdb = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, exitcode.With(exitcode.Usage, fmt.Errorf("redis.url %s: %w", Redact(cfg.URL), err))
		}
		set.apply(&o.TLSConfig, &o.PoolSize, &o.DialTimeout, &o.Protocol, &o.ContextTimeoutEnabled)
		rdb = redis.NewClient(o)
	}
	return rdb, nil
}

// redisSettings are what keyfleet sets on the options parsed from the URL, the
// same for a cluster client and a single-server one.
type redisSettings struct {
	url         string
	tls         *tls.Config // nil: the URL's
	poolSize    int         // at least this many connections
	dialTimeout time.Duration
}

// apply sets them on the fields of one kind of options.
func (s redisSettings) apply(tlsConf **tls.Config, poolSize *int, dialTimeout *time.Duration, protocol *int, contextTimeout *bool) {
	if s.tls != nil {
		*tlsConf = mergeTLS(*tlsConf, s.tls)
	}
	*poolSize = max(*poolSize, s.poolSize)
	*dialTimeout = min(*dialTimeout, s.dialTimeout)
	*protocol = resp(s.url, *protocol)
	// Context deadlines bound socket reads and writes too, so that a
	// Redis that accepts but never answers cannot hold a call past them.
	*contextTimeout = true
}

// resp picks the Redis protocol: RESP2 unless the URL asks for another
// ("?protocol=3"). keyfleet needs nothing of RESP3, and with it go-redis
// peeks the socket for push notifications before every command, one more
// system call per command.
func resp(rawURL string, parsed int) int {
	if strings.Contains(rawURL, "protocol=") {
		return parsed
	}
	return 2
}

// clusterURL accepts seed nodes as a comma-separated host list
// ("redis://h1:7000,h2:7001/0") besides go-redis' "?addr=" form.
func clusterURL(raw string) string {
	// No url.Parse test first: net/url accepts "h1:7000,h2:7001" as one
	// host whose port is 7001, so a parse that succeeds proves nothing.
	if !strings.Contains(raw, ",") {
		return raw
	}
	p, ok := config.SplitRedisURL(raw)
	if !ok {
		return raw
	}
	out := p.Scheme + "://" + p.Userinfo + p.Hosts[0] + p.Tail
	sep := "?"
	if strings.Contains(p.Tail, "?") {
		sep = "&"
	}
	for _, h := range p.Hosts[1:] {
		out += sep + "addr=" + url.QueryEscape(strings.TrimSpace(h))
		sep = "&"
	}
	return out
}

func mergeTLS(base, extra *tls.Config) *tls.Config {
	if base == nil {
		return extra
	}
	c := extra.Clone()
	if c.ServerName == "" {
		c.ServerName = base.ServerName
	}
	return c
}

func tlsConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // an explicit operator choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, errors.New("cert_file and key_file go together")
		}
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
