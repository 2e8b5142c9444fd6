package producer

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
)

// Every kind of bad input is reported with its line (and ID), exits 2 and
// publishes nothing of the input, even the good lines before the bad one.
func TestProducerRejectsBadInput(t *testing.T) {
	f := e2etest.SleepOnlyFleet(t, "", "")
	good := e2etest.JSONLItems(5, `{"id":%q,"ms":0}`)
	huge := `{"id":"huge","pad":"` + strings.Repeat("x", 1<<20) + `"}` // over NATS's default 1 MiB max payload
	tests := []struct {
		name, input string
		want        []string // in stderr
	}{
		{"malformed line", good + "{\"id\":\"m\",\n", []string{"bad.jsonl: line 6: malformed JSON"}},
		{"not an object", good + "[1,2]\n", []string{"line 6: not a JSON object"}},
		{"missing ID", good + `{"ms":1}` + "\n", []string{"line 6: no ID"}},
		{"empty ID", good + `{"id":"","ms":1}` + "\n", []string{"line 6: empty ID"}},
		{"ID of a wrong type", good + `{"id":1.5}` + "\n", []string{"line 6: bad ID"}},
		{"duplicate ID", good + "\n" + `{"id":"item-0002","ms":1}` + "\n", []string{`line 7: item "item-0002": duplicate ID (first on line 3)`}},
		{"item larger than the max payload", good + huge + "\n", []string{`line 6: item "huge": item too large`, "max_payload"}},
		{"item just over the max payload with its headers", good + `{"id":"edge","pad":"` + strings.Repeat("y", 1<<20-40) + `"}` + "\n",
			[]string{`line 6: item "edge": item too large`, "message headers"}},
		{"not UTF-8", good + "{\"id\":\"caf\xe9\"}\n", []string{"line 6: not valid UTF-8"}},
		{"several problems", "{\"id\":\"a\"}\nnope\n{\"id\":\"a\"}\n" + good, []string{"line 2: malformed JSON", `line 3: item "a": duplicate ID (first on line 1)`, "2 bad lines"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := f.WriteInput("bad.jsonl", tc.input)
			r := f.Producer(nil, "enqueue", "--kind", "sleep", path)
			if r.Code != 2 {
				t.Fatalf("want exit 2:\n%s", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Stderr, w) {
					t.Fatalf("stderr lacks %q:\n%s", w, r)
				}
			}
			if !strings.Contains(r.Stderr, "nothing was enqueued") {
				t.Fatalf("stderr does not say nothing was enqueued:\n%s", r)
			}
			if st := f.QueueStats(); st.Stream.Messages != 0 {
				t.Fatalf("the stream holds %d messages after a rejected input", st.Stream.Messages)
			}
		})
	}
	t.Run("from stdin", func(t *testing.T) {
		r := f.Producer([]byte(good+"{\"id\":\"item-0001\"}\n"), "enqueue", "--kind", "sleep", "-")
		if r.Code != 2 || !strings.Contains(r.Stderr, `stdin: line 6: item "item-0001": duplicate ID (first on line 2)`) {
			t.Fatalf("want exit 2 naming stdin line 6:\n%s", r)
		}
		if st := f.QueueStats(); st.Stream.Messages != 0 {
			t.Fatalf("the stream holds %d messages", st.Stream.Messages)
		}
	})
	t.Run("empty input", func(t *testing.T) {
		r := f.Producer(nil, "enqueue", "--kind", "sleep", f.WriteInput("empty.jsonl", "\n\n"))
		if r.Code != 0 || !strings.Contains(r.Stdout, "0 items") {
			t.Fatalf("want exit 0 and \"0 items\":\n%s", r)
		}
	})
	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"enqueue", "--kind", "nope", f.WriteInput("ok.jsonl", good)},
			{"enqueue", "--kind", "sleep", f.Dir + "/missing.jsonl"},
			{"enqueue", "--kind", "sleep"},
			{"enqueue", "--bogus-flag", "x.jsonl"},
		} {
			if r := f.Producer(nil, args...); r.Code != 2 {
				t.Fatalf("want exit 2:\n%s", r)
			}
		}
		if st := f.QueueStats(); st.Stream.Messages != 0 {
			t.Fatalf("the stream holds %d messages", st.Stream.Messages)
		}
	})
}

var enqueuedRE = regexp.MustCompile(`Enqueued batch (\S+): (\d+) items of kind (\S+) from \S+ \((\d+) new, (\d+) duplicates`)

// The same file twice: one set of messages; the repeat reports duplicates.
// Standard input with the same content gets its own batch (stdin-<hash>)
// and is deduplicated against itself the same way.
func TestProducerEnqueueTwiceAddsNothing(t *testing.T) {
	f := e2etest.SleepOnlyFleet(t, "", "")
	const n = 200
	content := e2etest.JSONLItems(n, `{"id":%q,"ms":1}`)
	path := f.WriteInput("items.jsonl", content)

	first := f.Producer(nil, "enqueue", "--kind", "sleep", path)
	m := enqueuedRE.FindStringSubmatch(first.Stdout)
	if first.Code != 0 || m == nil || m[2] != fmt.Sprint(n) || m[4] != fmt.Sprint(n) || m[5] != "0" {
		t.Fatalf("first enqueue:\n%s", first)
	}
	batch := m[1]
	if !regexp.MustCompile(`^items-[0-9a-f]{8}$`).MatchString(batch) {
		t.Fatalf("default batch %q is not items-<8 hex digits>", batch)
	}
	second := f.Producer(nil, "enqueue", "--kind", "sleep", path)
	m2 := enqueuedRE.FindStringSubmatch(second.Stdout)
	if second.Code != 0 || m2 == nil || m2[1] != batch || m2[4] != "0" || m2[5] != fmt.Sprint(n) {
		t.Fatalf("second enqueue: want 0 new, %d duplicates in batch %s:\n%s", n, batch, second)
	}
	if st := f.QueueStats(); st.Stream.Messages != n || st.Consumer.Pending != n {
		t.Fatalf("want %d messages, got %+v", n, st)
	}

	// The same content on stdin: batch stdin-<same hash>, new messages once.
	hash := strings.TrimPrefix(batch, "items-")
	for i, wantNew := range []int{n, 0} {
		r := f.Producer([]byte(content), "enqueue", "--kind", "sleep", "-")
		m := enqueuedRE.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil || m[1] != "stdin-"+hash || m[4] != fmt.Sprint(wantNew) || m[5] != fmt.Sprint(n-wantNew) {
			t.Fatalf("stdin run %d: want batch stdin-%s with %d new:\n%s", i+1, hash, wantNew, r)
		}
	}
	if st := f.QueueStats(); st.Stream.Messages != 2*n {
		t.Fatalf("want %d messages, got %d", 2*n, st.Stream.Messages)
	}
	t.Logf("first run %s, repeat %s", first.Took.Round(1e6), second.Took.Round(1e6))
}

// A dry run lists the items and needs no server; it publishes nothing.
func TestProducerDryRunNeedsNoServer(t *testing.T) {
	f := e2etest.SleepOnlyFleet(t, "", "")
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(3, `{"id":%q}`))
	r := e2etest.RunProducer(t, f.Env, nil, "enqueue", "--dry-run", "--nats-url", "nats://127.0.0.1:1", "--kind", "sleep", path)
	if r.Code != 0 {
		t.Fatalf("dry run without a server:\n%s", r)
	}
	for _, w := range []string{"would enqueue 3 items", "  - item-0000\n  - item-0001\n  - item-0002\n", "1 MiB"} {
		if !strings.Contains(r.Stdout, w) {
			t.Fatalf("dry run output lacks %q:\n%s", w, r)
		}
	}
	bad := f.WriteInput("bad.jsonl", "{\"id\":\"a\"}\n{\"id\":\"a\"}\n")
	if r := f.Producer(nil, "enqueue", "--dry-run", "--kind", "sleep", bad); r.Code != 2 || !strings.Contains(r.Stderr, "line 2") {
		t.Fatalf("dry run of a bad file:\n%s", r)
	}
	if st := f.QueueStats(); st.Stream.Messages != 0 {
		t.Fatalf("a dry run published %d messages", st.Stream.Messages)
	}
}
