package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// durationKeys are the duration keys of the file, each with the YAML that
// puts a value under it and the getter of the decoded value.
var durationKeys = []struct {
	path string
	doc  string // %s is the value
	get  func(*config.Config) time.Duration
}{
	{"nats.connect_timeout", "nats:\n  connect_timeout: %s\n", func(c *config.Config) time.Duration { return c.NATS.ConnectTimeout }},
	{"pool.lease_ttl", "pool:\n  lease_ttl: %s\n", func(c *config.Config) time.Duration { return c.Pool.LeaseTTL }},
	{"pool.cooldown", "pool:\n  cooldown: %s\n", func(c *config.Config) time.Duration { return c.Pool.Cooldown }},
	{"worker.shutdown_grace", "worker:\n  shutdown_grace: %s\n", func(c *config.Config) time.Duration { return c.Worker.ShutdownGrace }},
	{"worker.heartbeat", "worker:\n  heartbeat: %s\n", func(c *config.Config) time.Duration { return c.Worker.Heartbeat }},
	{"worker.retry_backoff[1]", "worker:\n  retry_backoff: [1s, %s]\n", func(c *config.Config) time.Duration { return c.Worker.RetryBackoff[1] }},
	{"queue.ack_wait", "queue:\n  ack_wait: %s\n", func(c *config.Config) time.Duration { return c.Queue.AckWait }},
	{"queue.redelivery_backoff[0]", "queue:\n  redelivery_backoff:\n    - %s\n", func(c *config.Config) time.Duration { return c.Queue.RedeliveryBackoff[0] }},
	{"queue.duplicate_window", "queue:\n  duplicate_window: %s\n", func(c *config.Config) time.Duration { return c.Queue.DuplicateWindow }},
	{"queue.results_max_age", "queue:\n  results_max_age: %s\n", func(c *config.Config) time.Duration { return c.Queue.ResultsMaxAge }},
	{"jobs.exec.timeout", "jobs:\n  exec:\n    command: [x]\n    timeout: %s\n", func(c *config.Config) time.Duration { return c.Jobs.Exec.Timeout }},
	{"jobs.http.timeout", "jobs:\n  http: {url: 'http://h/x', timeout: %s}\n", func(c *config.Config) time.Duration { return c.Jobs.HTTP.Timeout }},
}

// FuzzDuration puts arbitrary text under every duration key, through the
// decode path Load uses. Quoted, it must decode exactly when
// time.ParseDuration accepts it, to the same value, and otherwise give one
// error line naming the file and the key. Unquoted (plain YAML, which may
// break the document's structure), it must not panic and every error line
// must name the file. A decoded Config must survive Validate.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{
		"30s", "0", "-5s", "+1h", "1h30m", "1.5s", "500ms", "2µs", "2μs", "3us", "7ns", ".5s", "1e3s", "5", "",
		"9223372036854775807ns", "9223372036854775808ns", "2562047h", "2562048h", "-0", "1s1s", "1 s", " 1s",
		"1S", "1d", "0x10s", "NaNs", "∞s", "1s\n", "'1s'", "[1s]", "{a: 1}", "~", "null", "true", "&a 1s", "*a",
		"!!str 1s", "!!int 5", "1s # comment", "1s\nworker: {}", "\"1s\"",
	} {
		for key := range len(durationKeys) {
			f.Add(s, uint8(key), true)
			f.Add(s, uint8(key), false)
		}
	}
	f.Fuzz(func(t *testing.T, s string, key uint8, quoted bool) {
		k := durationKeys[int(key)%len(durationKeys)]
		value := s
		if quoted {
			s = strings.ToValidUTF8(s, "\uFFFD")
			value = yamlQuote(s)
		}
		doc := fmt.Sprintf(k.doc, value)
		c, err := config.Parse("fuzz.yaml", []byte(doc))
		for _, line := range errLines(err) {
			if !strings.HasPrefix(line, "config: fuzz.yaml: ") {
				t.Fatalf("error line does not name the file: %q\ninput: %q", line, doc)
			}
		}
		if err == nil {
			if c == nil {
				t.Fatalf("nil Config without an error; input: %q", doc)
			}
			_ = c.Validate()
		}
		if !quoted {
			return
		}
		want, werr := time.ParseDuration(s)
		switch {
		case werr == nil && err != nil:
			t.Fatalf("%s: %q is a Go duration (%s) but the file was refused: %v", k.path, s, want, err)
		case werr == nil && k.get(c) != want:
			t.Fatalf("%s: %q decoded as %s, want %s", k.path, s, k.get(c), want)
		case werr != nil && err == nil:
			t.Fatalf("%s: %q is no Go duration (%v) but decoded as %s", k.path, s, werr, k.get(c))
		case werr != nil:
			lines := errLines(err)
			if len(lines) != 1 || !strings.Contains(lines[0], " "+k.path+": ") || !strings.Contains(lines[0], "not a duration") {
				t.Fatalf("%s: %q: want one line naming the key and saying it is not a duration, got:\n%v", k.path, s, err)
			}
		}
	})
}

// yamlQuote writes valid UTF-8 s as a YAML double-quoted scalar that reads
// back as exactly s: printable ASCII as is, everything else escaped (YAML
// refuses raw control characters even inside quotes).
func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			fmt.Fprintf(&b, "\\U%08x", r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
