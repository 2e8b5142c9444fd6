package config_test

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func TestDefault(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default() does not validate: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"nats.url", c.NATS.URL, "nats://127.0.0.1:4222"},
		{"nats.connect_timeout", c.NATS.ConnectTimeout, 5 * time.Second},
		{"nats.startup_timeout", c.NATS.StartupTimeout, 60 * time.Second},
		{"redis.url", c.Redis.URL, "redis://127.0.0.1:6379/0"},
		{"redis.cluster", c.Redis.Cluster, false},
		{"pool.name", c.Pool.Name, "default"},
		{"pool.lease_ttl", c.Pool.LeaseTTL, 30 * time.Second},
		{"pool.cooldown", c.Pool.Cooldown, 60 * time.Second},
		{"pool.credentials", len(c.Pool.Credentials), 0},
		{"worker.concurrency", c.Worker.Concurrency, 3},
		{"worker.shutdown_grace", c.Worker.ShutdownGrace, 20 * time.Second},
		{"worker.max_attempts", c.Worker.MaxAttempts, 5},
		{"worker.retry_backoff", c.Worker.RetryBackoff, []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}},
		{"worker.listen", c.Worker.Listen, ""},
		{"worker.heartbeat", c.Worker.Heartbeat, 5 * time.Second},
		{"queue.stream", c.Queue.Stream, "KEYFLEET"},
		{"queue.subject_prefix", c.Queue.SubjectPrefix, "keyfleet.items"},
		{"queue.consumer", c.Queue.Consumer, "keyfleet-workers"},
		{"queue.ack_wait", c.Queue.AckWait, 30 * time.Second},
		{"queue.max_deliver", c.Queue.MaxDeliver, -1},
		{"queue.redelivery_backoff", len(c.Queue.RedeliveryBackoff), 0},
		{"queue.duplicate_window", c.Queue.DuplicateWindow, 2 * time.Hour},
		{"queue.replicas", c.Queue.Replicas, 1},
		{"queue.storage", c.Queue.Storage, "file"},
		{"queue.results_max_age", c.Queue.ResultsMaxAge, 168 * time.Hour},
		{"jobs.max_output", c.Jobs.MaxOutput, 65536},
		{"jobs.exec configured", c.Jobs.Exec != nil, false},
		{"jobs.http configured", c.Jobs.HTTP != nil, false},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "auto"},
		{"Source", c.Source, config.DefaultsSource},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s: want %v, got %v", ch.name, ch.want, ch.got)
		}
	}
	// Each call returns a fresh value.
	c.Worker.RetryBackoff[0] = time.Hour
	if got := config.Default().Worker.RetryBackoff[0]; got != time.Second {
		t.Errorf("Default() shares its slices: want 1s, got %s", got)
	}
}

func TestLoadSources(t *testing.T) {
	fileA := writeFile(t, "a.yaml", "worker: {concurrency: 7}\n")
	fileB := writeFile(t, "b.yaml", "worker: {concurrency: 9}\n")
	tests := []struct {
		name            string
		path            string
		vars            map[string]string
		wantSource      string
		wantConcurrency int
		wantNATS        string
		wantRedis       string
	}{
		{name: "nothing: built-in defaults", wantSource: config.DefaultsSource, wantConcurrency: 3,
			wantNATS: "nats://127.0.0.1:4222", wantRedis: "redis://127.0.0.1:6379/0"},
		{name: "path", path: fileA, wantSource: fileA, wantConcurrency: 7,
			wantNATS: "nats://127.0.0.1:4222", wantRedis: "redis://127.0.0.1:6379/0"},
		{name: "KEYFLEET_CONFIG", vars: map[string]string{"KEYFLEET_CONFIG": fileB}, wantSource: fileB, wantConcurrency: 9,
			wantNATS: "nats://127.0.0.1:4222", wantRedis: "redis://127.0.0.1:6379/0"},
		{name: "path beats KEYFLEET_CONFIG", path: fileA, vars: map[string]string{"KEYFLEET_CONFIG": fileB},
			wantSource: fileA, wantConcurrency: 7,
			wantNATS: "nats://127.0.0.1:4222", wantRedis: "redis://127.0.0.1:6379/0"},
		{name: "URL variables override defaults",
			vars: map[string]string{
				"KEYFLEET_NATS_URL":  "nats://nats:4222",
				"KEYFLEET_REDIS_URL": "redis://redis:6379/1",
			},
			wantSource: config.DefaultsSource, wantConcurrency: 3,
			wantNATS: "nats://nats:4222", wantRedis: "redis://redis:6379/1"},
		{name: "URL variables override the file",
			path: writeFile(t, "urls.yaml", "nats: {url: nats://file:4222}\nredis: {url: redis://file:6379/0}\n"),
			vars: map[string]string{
				"KEYFLEET_NATS_URL":  "tls://env:4222",
				"KEYFLEET_REDIS_URL": "rediss://env:6380/2",
			},
			wantConcurrency: 3, wantNATS: "tls://env:4222", wantRedis: "rediss://env:6380/2"},
		{name: "empty URL variables change nothing",
			path:            writeFile(t, "urls.yaml", "nats: {url: nats://file:4222}\nredis: {url: redis://file:6379/0}\n"),
			vars:            map[string]string{"KEYFLEET_NATS_URL": "", "KEYFLEET_REDIS_URL": ""},
			wantConcurrency: 3, wantNATS: "nats://file:4222", wantRedis: "redis://file:6379/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(tt.path, env(tt.vars))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tt.wantSource != "" && c.Source != tt.wantSource {
				t.Errorf("Source: want %q, got %q", tt.wantSource, c.Source)
			}
			if c.Worker.Concurrency != tt.wantConcurrency {
				t.Errorf("worker.concurrency: want %d, got %d", tt.wantConcurrency, c.Worker.Concurrency)
			}
			if c.NATS.URL != tt.wantNATS {
				t.Errorf("nats.url: want %q, got %q", tt.wantNATS, c.NATS.URL)
			}
			if c.Redis.URL != tt.wantRedis {
				t.Errorf("redis.url: want %q, got %q", tt.wantRedis, c.Redis.URL)
			}
		})
	}
}

func TestLoadEnvErrors(t *testing.T) {
	missing := writeFile(t, "x.yaml", "") + ".gone"
	tests := []struct {
		name string
		path string
		vars map[string]string
		want string
	}{
		{
			name: "KEYFLEET_CONFIG names a missing file",
			vars: map[string]string{"KEYFLEET_CONFIG": missing},
			want: "config: " + missing + " (from KEYFLEET_CONFIG): cannot read: no such file or directory",
		},
		{
			name: "bad KEYFLEET_NATS_URL",
			vars: map[string]string{"KEYFLEET_NATS_URL": "http://nats:4222"},
			want: `config: built-in defaults: nats.url (from KEYFLEET_NATS_URL): scheme "http" is not one of nats, tls, ws, wss`,
		},
		{
			name: "bad KEYFLEET_REDIS_URL",
			vars: map[string]string{"KEYFLEET_REDIS_URL": "memcached://r:11211"},
			want: `config: built-in defaults: redis.url (from KEYFLEET_REDIS_URL): scheme "memcached" is not one of redis, rediss, unix`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Load(tt.path, env(tt.vars))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("want error\n  %s\ngot\n  %v", tt.want, err)
			}
		})
	}
}

func TestLoadMissingFileIsNotExist(t *testing.T) {
	path := writeFile(t, "x.yaml", "") + ".gone"
	_, err := config.Load(path, env(nil))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want an error matching fs.ErrNotExist, got %v", err)
	}
	if want := "config: " + path + ": cannot read: no such file or directory"; err.Error() != want {
		t.Fatalf("want %q, got %q", want, err)
	}
}

func TestLoadEmptyFileGivesDefaults(t *testing.T) {
	for _, content := range []string{"", "\n\n", "# all commented out\n# nats: {url: x}\n", "---\n", "~\n"} {
		t.Run(strings.TrimSpace(content), func(t *testing.T) {
			path := writeFile(t, "empty.yaml", content)
			c, err := config.Load(path, env(nil))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := config.Default()
			want.Source = path
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("want the defaults\n  %+v\ngot\n  %+v", want, c)
			}
		})
	}
}

func TestLoadFillsSectionDefaults(t *testing.T) {
	path := writeFile(t, "kf.yaml", `
pool:
  credentials:
    - {id: a, secret_env: A}
    - {id: b, secret_file: /run/secrets/b, max_concurrent: 4, rate: 5/30s}
worker:
  concurrency: 8
jobs:
  exec: {command: [./run.sh, --fast]}
  http: {url: "https://api.example.com/v1/x"}
`)
	c, err := config.Load(path, env(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	wantCreds := []config.Credential{
		{ID: "a", SecretEnv: "A", MaxConcurrent: 1},
		{ID: "b", SecretFile: "/run/secrets/b", MaxConcurrent: 4, Rate: ratelimit.Limit{N: 5, Period: 30 * time.Second}},
	}
	if !reflect.DeepEqual(c.Pool.Credentials, wantCreds) {
		t.Errorf("credentials:\nwant %+v\ngot  %+v", wantCreds, c.Pool.Credentials)
	}
	wantExec := &config.ExecJob{Command: []string{"./run.sh", "--fast"}, Timeout: 10 * time.Minute}
	if !reflect.DeepEqual(c.Jobs.Exec, wantExec) {
		t.Errorf("jobs.exec:\nwant %+v\ngot  %+v", wantExec, c.Jobs.Exec)
	}
	wantHTTP := &config.HTTPJob{URL: "https://api.example.com/v1/x", Method: "POST", Header: "Authorization",
		Format: "Bearer {secret}", Timeout: time.Minute}
	if !reflect.DeepEqual(c.Jobs.HTTP, wantHTTP) {
		t.Errorf("jobs.http:\nwant %+v\ngot  %+v", wantHTTP, c.Jobs.HTTP)
	}
	// Keys the file leaves out keep their defaults.
	if c.Worker.MaxAttempts != 5 || c.Pool.LeaseTTL != 30*time.Second || c.Queue.Stream != "KEYFLEET" {
		t.Errorf("defaults lost: max_attempts %d, lease_ttl %s, stream %q",
			c.Worker.MaxAttempts, c.Pool.LeaseTTL, c.Queue.Stream)
	}
}

func TestLoadValues(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		got  func(*config.Config) any
		want any
	}{
		{"max_output bytes", "jobs: {max_output: 1000}", func(c *config.Config) any { return c.Jobs.MaxOutput }, 1000},
		{"max_output KiB", "jobs: {max_output: 64KiB}", func(c *config.Config) any { return c.Jobs.MaxOutput }, 65536},
		{"max_output MiB with space", "jobs: {max_output: 2 MiB}", func(c *config.Config) any { return c.Jobs.MaxOutput }, 2 << 20},
		{"max_output zero", "jobs: {max_output: 0}", func(c *config.Config) any { return c.Jobs.MaxOutput }, 0},
		{"exec null is not configured", "jobs: {exec: ~}", func(c *config.Config) any { return c.Jobs.Exec == nil }, true},
		{"redis cluster seeds", "redis: {url: 'redis://h1:7000,h2:7001', cluster: true}", func(c *config.Config) any { return c.Redis.URL }, "redis://h1:7000,h2:7001"},
		{"nats server list", "nats: {url: 'nats://a:4222, nats://b:4222'}", func(c *config.Config) any { return c.NATS.URL }, "nats://a:4222, nats://b:4222"},
		{"redis unix socket", "redis: {url: 'unix:///run/redis.sock'}", func(c *config.Config) any { return c.Redis.URL }, "unix:///run/redis.sock"},
		{"merge into worker", "worker:\n  <<: {concurrency: 6, heartbeat: 2s}\n  concurrency: 4\n",
			func(c *config.Config) any { return [2]any{c.Worker.Concurrency, c.Worker.Heartbeat} }, [2]any{4, 2 * time.Second}},
		{"anchors and aliases", "pool:\n  credentials:\n    - &k {id: a, secret_env: A, max_concurrent: 2}\n    - {<<: *k, id: b}\n",
			func(c *config.Config) any { return c.Pool.Credentials[1] }, config.Credential{ID: "b", SecretEnv: "A", MaxConcurrent: 2}},
		{"redelivery backoff", "queue: {ack_wait: 30s, redelivery_backoff: [30s, 1m, 5m]}",
			func(c *config.Config) any { return c.Queue.RedeliveryBackoff }, []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute}},
		{"listen port 0", "worker: {listen: '127.0.0.1:0'}", func(c *config.Config) any { return c.Worker.Listen }, "127.0.0.1:0"},
		{"startup_timeout 0: one attempt", "nats: {startup_timeout: 0s}", func(c *config.Config) any { return c.NATS.StartupTimeout }, time.Duration(0)},
		{"startup_timeout", "nats: {startup_timeout: 5m}", func(c *config.Config) any { return c.NATS.StartupTimeout }, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(writeFile(t, "kf.yaml", tt.yaml), env(nil))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("want %v, got %v", tt.want, got)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	w := config.Default().Worker
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{{0, 0}, {1, time.Second}, {2, 5 * time.Second}, {4, 2 * time.Minute}, {9, 2 * time.Minute}} {
		if got := w.RetryDelay(tt.failures); got != tt.want {
			t.Errorf("RetryDelay(%d): want %s, got %s", tt.failures, tt.want, got)
		}
	}
	if got := (config.Worker{}).RetryDelay(3); got != 0 {
		t.Errorf("RetryDelay with no backoff: want 0, got %s", got)
	}
}

// Flags are applied after Load; Validate then sees them.
func TestValidateAfterFlags(t *testing.T) {
	c, err := config.Load(writeFile(t, "kf.yaml", "worker: {concurrency: 2}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c.Worker.Concurrency = 0 // --concurrency 0
	want := "config: " + c.Source + ": worker.concurrency: must be at least 1, got 0"
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Fatalf("want %q, got %v", want, err)
	}
}
