package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// The dry run's size computation must agree with the queue's.
func TestWireSizeMatchesFits(t *testing.T) {
	_, q := testQueue(t, natstest.Start(t).URL(), "SIZE", queue.Open)
	for _, it := range []kftype.Item{
		{ID: "a", Batch: "b", Kind: "exec", Payload: []byte(`{"id":"a"}`)},
		{ID: strings.Repeat("x", 500), Batch: "items-3f2a9c1b", Kind: "sleep", Payload: bytes.Repeat([]byte("p"), 5000)},
		{ID: "ü é", Batch: "batch with spaces", Kind: "http", Payload: []byte(`{}`)},
	} {
		size, limit, ok := q.Fits(it)
		if got, _ := queue.Fits(it, dryRunMaxPayload); got != size {
			t.Errorf("item %.20q: dry run's size %d, the queue's %d", it.ID, got, size)
		}
		if !ok || limit != dryRunMaxPayload {
			t.Errorf("Fits: limit %d ok %v; the dry run assumes %d", limit, ok, dryRunMaxPayload)
		}
	}
}

// Without --kind, enqueue takes the only kind the configuration defines,
// named (jobs.kinds) or built-in (jobs.exec, jobs.http); several or none
// is a usage error naming them. The flag's help lists them.
func TestDefaultKind(t *testing.T) {
	for _, c := range []struct {
		name  string
		jobs  config.Jobs
		want  string
		err   string
		usage string
	}{
		{name: "none", err: "the configuration (kf.yaml) defines no job kind (jobs.kinds, jobs.exec or jobs.http); give --kind (sleep needs no configuration)",
			usage: "job kind: the configuration (kf.yaml) defines none, so give one: sleep needs no configuration"},
		{name: "only http", jobs: config.Jobs{HTTP: &config.HTTPJob{URL: "http://x"}}, want: "http",
			usage: "job kind: http, or sleep (default http: the only kind the configuration (kf.yaml) defines)"},
		{name: "only a named kind", jobs: config.Jobs{Kinds: map[string]config.Kind{"chat": {HTTP: &config.HTTPJob{URL: "http://y"}}}},
			want: "chat", usage: "job kind: chat, or sleep (default chat: the only kind the configuration (kf.yaml) defines)"},
		{name: "exec and http", jobs: config.Jobs{Exec: &config.ExecJob{Command: []string{"x"}}, HTTP: &config.HTTPJob{URL: "http://x"}},
			err: "the configuration (kf.yaml) defines several job kinds: exec, http; give one of them with --kind", usage: "job kind: exec, http (defined by the configuration, kf.yaml), or sleep; required: it defines several"},
		{name: "a named kind and exec", jobs: config.Jobs{Exec: &config.ExecJob{Command: []string{"x"}},
			Kinds: map[string]config.Kind{"chat": {HTTP: &config.HTTPJob{URL: "http://y"}}, "embed": {HTTP: &config.HTTPJob{URL: "http://z"}}}},
			err: "the configuration (kf.yaml) defines several job kinds: chat, embed, exec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Source = "kf.yaml"
			cfg.Jobs = c.jobs
			got, err := defaultKind(cfg)
			switch {
			case c.err == "" && (err != nil || got != c.want):
				t.Fatalf("want %s, got %q, %v", c.want, got, err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || exitcode.Of(err) != exitcode.Usage):
				t.Fatalf("want exit 2 saying %q, got %q, %v", c.err, got, err)
			}
			if u := kindFlagUsage(cfg); c.usage != "" && u != c.usage {
				t.Fatalf("--kind help:\nwant %s\ngot  %s", c.usage, u)
			}
		})
	}
}

// The note that workers would dead-letter a kind: for a built-in kind the
// file does not configure, never for a named kind of jobs.kinds (the demo
// printed it for its chat and embed kinds) nor without a file.
func TestKindNotServed(t *testing.T) {
	cfg := config.Default()
	cfg.Source = "kf.yaml"
	cfg.Jobs.HTTP = &config.HTTPJob{URL: "http://x"}
	cfg.Jobs.Kinds = map[string]config.Kind{"chat": {HTTP: &config.HTTPJob{URL: "http://y"}}}
	for kind, want := range map[string]bool{"http": false, "sleep": false, "chat": false, "exec": true} {
		if got := kindNotServed(cfg, kind); got != want {
			t.Errorf("kind %s: not served %v, want %v", kind, got, want)
		}
	}
	if kindNotServed(config.Default(), "exec") {
		t.Error("the built-in defaults (no file): want no note")
	}
}

// In-process run of the whole enqueue path: bad input publishes nothing,
// a repeat adds nothing.
func TestEnqueueInProcess(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, srv.URL(), "INPROC")
	good := filepath.Join(dir, "good.jsonl")
	if err := os.WriteFile(good, []byte("{\"id\":\"a\",\"ms\":1}\n{\"id\":\"b\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"id\":\"a\"}\n{\"id\":\"a\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := ProducerMain(append([]string{"--config", cfg}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, stderr := run("enqueue", "--kind", "sleep", bad); code != exitcode.Usage || !strings.Contains(stderr, `line 2: item "a": duplicate ID (first on line 1)`) {
		t.Fatalf("bad input: %d %s", code, stderr)
	}
	if code, _, stderr := run("enqueue", "--kind", "nope", good); code != exitcode.Usage || !strings.Contains(stderr, `--kind: unknown job kind "nope"`) ||
		strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Fatalf("unknown kind: want exit %d and one line, got %d %s", exitcode.Usage, code, stderr)
	}
	if code, out, stderr := run("enqueue", "--kind", "sleep", good); code != 0 || !strings.Contains(out, "(2 new, 0 duplicates)") {
		t.Fatalf("first: %d %s %s", code, out, stderr)
	}
	if code, out, stderr := run("enqueue", "--kind", "sleep", good); code != 0 || !strings.Contains(out, "(0 new, 2 duplicates") {
		t.Fatalf("repeat: %d %s %s", code, out, stderr)
	}
}

// testQueue connects to the NATS server at url and opens the queue of
// stream with open (queue.Open, or queue.Attach for one that exists). The
// context it returns ends with the test, or in 30s.
func testQueue(t *testing.T, url, stream string, open func(context.Context, *nats.Conn, queue.Config) (*queue.Queue, error)) (context.Context, *queue.Queue) {
	t.Helper()
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	q, err := open(ctx, nc, queue.Config{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, q
}

func writeConfig(t testing.TB, dir, natsURL, stream string) string {
	t.Helper()
	p := filepath.Join(dir, "kf.yaml")
	yaml := fmt.Sprintf("nats: {url: %q}\nqueue: {stream: %s}\nlog: {level: warn}\n", natsURL, stream)
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkEnqueue100k runs `producer enqueue` in process on 100,000 small
// items against an embedded NATS server (file storage): validation,
// hashing, and publishing with every publish confirmed. Each iteration is a
// new batch, so every item is stored.
func BenchmarkEnqueue100k(b *testing.B) {
	const n = 100_000
	srv := natstest.Start(b)
	dir := b.TempDir()
	cfg := writeConfig(b, dir, srv.URL(), "BENCH")
	file := filepath.Join(dir, "items.jsonl")
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, "{\"id\":\"item-%06d\",\"ms\":0,\"text\":\"hello\"}\n", i)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	_ = f.Close()
	b.ResetTimer()
	start := time.Now()
	i := 0
	for b.Loop() {
		i++
		var out, errb bytes.Buffer
		code := ProducerMain([]string{"--config", cfg, "enqueue", "--kind", "sleep", "--batch", fmt.Sprintf("bench-%d", i), file},
			strings.NewReader(""), &out, &errb)
		if code != 0 || !strings.Contains(out.String(), fmt.Sprintf("(%d new, 0 duplicates)", n)) {
			b.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
		}
	}
	b.ReportMetric(float64(n*i)/time.Since(start).Seconds(), "items/s")
}
