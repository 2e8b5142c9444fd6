package providers

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// docs/providers.md: a provider kind runs a provider's own batch file
// against a strict stand-in of the provider, written from its docs, that
// refuses what the real API refuses. Nothing is refused, the requests are
// the lines' bodies byte for byte, and the results come back in the
// provider's format.

// strictFleet is a fleet over a strict stand-in of provider, recording
// what reached it: two keys, a kind `llm` of that provider.
func strictFleet(t *testing.T, prov string, keyRate ratelimit.Limit) (*e2etest.Fleet, *fakeapi.Server) {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Provider: prov, Record: true,
		Keys: []fakeapi.Key{{Secret: e2etest.Secrets["key-a"], Rate: keyRate}, {Secret: e2etest.Secrets["key-b"], Rate: keyRate}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}\n- {id: key-b, secret_env: KEY_B, max_concurrent: 2}",
		Worker:      "concurrency: 4\nretry_backoff: [100ms]",
		Jobs:        fmt.Sprintf("kinds:\n  llm:\n    http: {provider: %s, url: %q}", prov, srv.URL),
		Env:         []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	return f, api
}

// bodiesByLine is what each request body of a batch file is (by its
// custom_id), exactly as the file holds it.
func bodiesByLine(t *testing.T, lines []string, field string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		var id string
		_ = json.Unmarshal(m["custom_id"], &id)
		out[id] = string(m[field])
	}
	return out
}

// checkSentExactly: every request the API got is one of the bodies, each
// body arrived (at least once), and no request was refused.
func checkSentExactly(t *testing.T, api *fakeapi.Server, bodies map[string]string) {
	t.Helper()
	want := map[string]bool{}
	for _, b := range bodies {
		want[b] = false
	}
	for _, r := range api.Received() {
		if _, ok := want[string(r.Body)]; !ok {
			t.Errorf("the API got a body that is no line's: %s %s %.300s", r.Method, r.Path, r.Body)
			continue
		}
		want[string(r.Body)] = true
	}
	for b, seen := range want {
		if !seen {
			t.Errorf("no request carried the body %.200s", b)
		}
	}
	if st := api.Stats(); st.BadRequests != 0 || st.Unauthorized != 0 {
		t.Errorf("the API refused %d requests as bad and %d as unauthorized", st.BadRequests, st.Unauthorized)
	}
}

func TestOpenAIBatchFileThroughTheFleet(t *testing.T) {
	f, api := strictFleet(t, fakeapi.ProviderOpenAI, ratelimit.Limit{})
	var lines []string
	for i := range 24 {
		lines = append(lines, fmt.Sprintf(`{"custom_id": "chat-%d", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Question %d <b>&</b>"}], "max_completion_tokens": 12, "temperature": 0.2}}`, i, i))
	}
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"custom_id":"emb-%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"text %d"}}`, i, i))
	}
	path := f.WriteInput("batchinput.jsonl", strings.Join(lines, "\n")+"\n")
	f.StartWorker("w1")
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", "openai-batch", "--batch", "oa", "--wait", path); r.Code != 0 {
		t.Fatalf("enqueue --wait:\n%s", r)
	}
	checkSentExactly(t, api, bodiesByLine(t, lines, "body"))

	r := f.Producer(nil, "results", "--batch", "oa", "--format", "openai-batch")
	if r.Code != 0 {
		t.Fatalf("results:\n%s", r)
	}
	out := e2etest.ParseJSONLines(t, r.Stdout)
	if len(out) != len(lines) {
		t.Fatalf("%d result lines, want %d:\n%s", len(out), len(lines), r.Stdout)
	}
	for _, l := range out {
		id, _ := l["custom_id"].(string)
		resp, _ := l["response"].(map[string]any)
		body, _ := resp["body"].(map[string]any)
		wantObject := "chat.completion"
		if strings.HasPrefix(id, "emb-") {
			wantObject = "list"
		}
		if resp["status_code"] != float64(200) || body["object"] != wantObject || l["error"] != nil ||
			!strings.HasPrefix(fmt.Sprint(l["id"]), "batch_req_") || fmt.Sprint(resp["request_id"]) == "" {
			t.Errorf("result line of %s is not OpenAI's output line of a success: %v", id, l)
		}
	}
	// The default results carry each reply's status.
	r = f.Producer(nil, "results", "--batch", "oa")
	for _, l := range e2etest.ParseJSONLines(t, r.Stdout) {
		if l["status_code"] != float64(200) || l["outcome"] != "succeeded" {
			t.Errorf("jsonl result: %v", l)
		}
	}
}

func TestAnthropicBatchFileThroughTheFleet(t *testing.T) {
	f, api := strictFleet(t, fakeapi.ProviderAnthropic, ratelimit.Limit{})
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"custom_id": "q-%d", "params": {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": "Be brief.", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello %d"}]}]}}`, i, i))
	}
	// One request the API refuses for good: its own error comes back.
	lines = append(lines, `{"custom_id": "bad", "params": {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}], "temprature": 1}}`)
	path := f.WriteInput("requests.jsonl", strings.Join(lines, "\n")+"\n")
	f.StartWorker("w1")
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", "anthropic-batch", "--batch", "an", "--wait", path); r.Code != 1 {
		t.Fatalf("enqueue --wait with one request the API refuses: want exit 1:\n%s", r)
	}
	r := f.Producer(nil, "results", "--batch", "an", "--format", "anthropic-batch")
	out := e2etest.ParseJSONLines(t, r.Stdout)
	if r.Code != 1 || len(out) != len(lines) {
		t.Fatalf("results: exit %d (want 1: an item failed), %d lines, want %d:\n%s", r.Code, len(out), len(lines), r)
	}
	for _, l := range out {
		res, _ := l["result"].(map[string]any)
		if l["custom_id"] == "bad" {
			e, _ := res["error"].(map[string]any)
			inner, _ := e["error"].(map[string]any)
			if res["type"] != "errored" || e["type"] != "error" || inner["message"] != "temprature: Extra inputs are not permitted" {
				t.Errorf("the refused request's result: %v", l)
			}
			continue
		}
		msg, _ := res["message"].(map[string]any)
		if res["type"] != "succeeded" || msg["type"] != "message" || msg["role"] != "assistant" {
			t.Errorf("result of %v is not a succeeded message: %v", l["custom_id"], l)
		}
	}
	// Every request was a line's params, byte for byte; the refused one
	// was sent once (a 400 is not retried).
	bodies := bodiesByLine(t, lines, "params")
	sent := 0
	for _, rcv := range api.Received() {
		if string(rcv.Body) == bodies["bad"] {
			sent++
		}
	}
	if sent != 1 {
		t.Errorf("the refused request was sent %d times, want once", sent)
	}
	delete(bodies, "bad")
	want := map[string]bool{}
	for _, b := range bodies {
		want[b] = true
	}
	for _, rcv := range api.Received() {
		if !want[string(rcv.Body)] && string(rcv.Body) != bodyOf(t, lines[len(lines)-1], "params") {
			t.Errorf("the API got a body that is no line's: %.200s", rcv.Body)
		}
	}
}

func bodyOf(t *testing.T, line, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	return string(m[field])
}

// JSON Lines on a provider kind: the request is the line without its ID;
// a line the provider would refuse stops the enqueue before anything is
// sent, naming the line and the field, and so does a provider format on a
// kind of another provider.
func TestProviderKindLinesChecked(t *testing.T) {
	f, api := strictFleet(t, fakeapi.ProviderOpenAI, ratelimit.Limit{})
	good := `{"id":"a","model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	bad := `{"id":"b","messages":[{"role":"user","content":"no model"}]}`
	path := f.WriteInput("chat.jsonl", good+"\n"+bad+"\n")
	for _, dry := range []bool{true, false} {
		args := []string{"enqueue", "--kind", "llm", "--batch", "lines", path}
		if dry {
			args = append(args, "--dry-run")
		}
		r := f.Producer(nil, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "line 2") || !strings.Contains(r.Stderr, "model") {
			t.Fatalf("a line without model (dry run %v): want exit 2 naming line 2 and model:\n%s", dry, r)
		}
	}
	r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", "anthropic-batch", "--batch", "other", path)
	if r.Code != 2 || !strings.Contains(r.Stderr, "anthropic-batch") {
		t.Fatalf("anthropic-batch on an openai kind: want exit 2:\n%s", r)
	}
	if st := f.QueueStats(); st.Stream.Messages != 0 {
		t.Fatalf("%d messages published from refused input", st.Stream.Messages)
	}
	path = f.WriteInput("good.jsonl", good+"\n")
	f.StartWorker("w1")
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "lines", "--wait", path); r.Code != 0 {
		t.Fatalf("enqueue --wait:\n%s", r)
	}
	got := api.Received()
	if len(got) != 1 || string(got[0].Body) != `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}` {
		t.Fatalf("the API got %d requests, the first %q: want the line without its id", len(got), got[0].Body)
	}
}

// A persistent handler passes the API's rate-limit headers back, and the
// fleet paces the keys from them: the keys' limits are not told, yet few
// requests are refused. The official-SDK handler (examples/node) and the
// Python one (examples/python) both do.
func TestHandlersPassHeaders(t *testing.T) {
	for _, h := range []struct{ name, command string }{
		{"node", fmt.Sprintf("[%q, %q]", "node", examplePath(t, "../node/handler.mjs"))},
		{"python", fmt.Sprintf("[%q, %q]", e2etest.Python3(t), examplePath(t, "handler.py"))},
	} {
		t.Run(h.name, func(t *testing.T) {
			api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Latency: 5 * time.Millisecond,
				Keys: []fakeapi.Key{
					{Secret: e2etest.Secrets["key-a"], Rate: ratelimit.Limit{N: 10, Period: time.Second}},
					{Secret: e2etest.Secrets["key-b"], Rate: ratelimit.Limit{N: 10, Period: time.Second}},
				}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			f := e2etest.NewFleet(t, e2etest.FleetOptions{
				Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 2}\n- {id: key-b, secret_env: KEY_B, max_concurrent: 2}",
				Worker:      "concurrency: 4\nretry_backoff: [100ms]",
				Jobs:        fmt.Sprintf("exec:\n  command: %s\n  persistent: true\n  timeout: 30s", h.command),
				Env: []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"],
					"OPENAI_BASE_URL=" + srv.URL + "/v1", "EXAMPLE_TIMEOUT=10"},
			})
			const n = 60
			f.StartWorker("w1")
			path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q,"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}],"max_completion_tokens":4}`))
			if r := f.Producer(nil, "enqueue", "--kind", "exec", "--batch", "h", "--wait", path); r.Code != 0 {
				t.Fatalf("enqueue --wait:\n%s\n%s", r, e2etest.Tail(f.Logs(), 40))
			}
			var ok, limited int64
			for _, k := range api.Stats().Keys {
				ok += k.OK
				limited += k.RateLimited
			}
			if ok != n {
				t.Errorf("the API answered %d requests with 200, want %d", ok, n)
			}
			// 60 requests on 2 keys of 10/s: without the headers the pool
			// knows nothing until a 429; with them it rests each key at its
			// reset. A generous bound here: make bench measures the rate.
			if limited > n/4 {
				t.Errorf("%d requests were refused with 429 for %d answered: the headers did not pace the keys", limited, ok)
			}
			if logs := f.Logs(); strings.Contains(logs, e2etest.Secrets["key-a"]) || strings.Contains(logs, e2etest.Secrets["key-b"]) {
				t.Error("a secret reached the logs")
			}
		})
	}
}
