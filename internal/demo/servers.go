package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// startNATS runs an embedded JetStream server unless KEYFLEET_NATS_URL is
// set.
func (d *demo) startNATS() (string, error) {
	if u := os.Getenv("KEYFLEET_NATS_URL"); u != "" {
		return u, nil
	}
	n, err := launch.StartNATS(launch.JetStreamOptions(filepath.Join(d.dir, "nats")))
	if err != nil {
		return "", fmt.Errorf("NATS: %w", err)
	}
	d.onCleanup(n.Shutdown)
	return n.URL(), nil
}

// startRedis runs a redis-server on a free port unless KEYFLEET_REDIS_URL
// is set.
func (d *demo) startRedis(ctx context.Context) (string, error) {
	if u := os.Getenv("KEYFLEET_REDIS_URL"); u != "" {
		return u, nil
	}
	dir := filepath.Join(d.dir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	r, err := launch.StartRedis(ctx, launch.RedisOptions{Dir: dir, OwnGroup: true})
	if err != nil {
		return "", fmt.Errorf("%w; or set KEYFLEET_REDIS_URL to a running Redis", err)
	}
	d.onCleanup(r.Stop)
	return r.URL(), nil
}

// startAPI serves the stand-in API of the first part (the enrich kind's
// keys) on a free loopback port.
func (d *demo) startAPI() (string, *fakeapi.Server, error) {
	return d.serveAPI(fakeapi.Config{Keys: apiKeys(demoKeys), Latency: 60 * time.Millisecond})
}

// startOpenAI serves a strict stand-in of OpenAI's API (fakeapi's
// provider mode: it refuses what OpenAI refuses, answers as OpenAI
// answers) for the second part's keys.
func (d *demo) startOpenAI() (string, *fakeapi.Server, error) {
	return d.serveAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: apiKeys(kindKeys), Latency: 60 * time.Millisecond})
}

// apiKeys are the stand-in's keys of ks (the revoked ones it does not
// know), each with its secret.
func apiKeys(ks []demoKey) []fakeapi.Key {
	keys := make([]fakeapi.Key, 0, len(ks))
	for i := range ks {
		if !ks[i].revoked {
			ks[i].api.Secret = ks[i].secret
			keys = append(keys, ks[i].api)
		}
	}
	return keys
}

// serveAPI serves a stand-in API on a free loopback port until the demo
// ends.
func (d *demo) serveAPI(cfg fakeapi.Config) (string, *fakeapi.Server, error) {
	api, err := fakeapi.New(cfg)
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
