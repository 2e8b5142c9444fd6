package providers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// The Python examples (examples/python), run with the python3 on the
// machine against internal/fakeapi, which answers like an OpenAI-style
// API (usage.total_tokens in every 200).

// examplePath is the path of a file under examples/python.
func examplePath(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "python", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// exampleAPI is fakeapi with the test keys: key-a is "key-0", key-b
// "key-1", limited to rateB (zero: unlimited).
func exampleAPI(t *testing.T, cfg fakeapi.Config, rateB ratelimit.Limit) (*fakeapi.Server, string) {
	t.Helper()
	cfg.Keys = []fakeapi.Key{{Secret: e2etest.Secrets["key-a"]}, {Secret: e2etest.Secrets["key-b"], Rate: rateB}}
	api, err := fakeapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL + "/v1/chat/completions"
}

// The handler speaks the protocol and maps the API's answers: 200 → ok
// with the reply as output and usage.total_tokens as cost; 429 →
// rate_limited with its Retry-After (retry-after-ms first); an
// insufficient-quota 429 and a 401 → rejected; other 4xx → permanent;
// 5xx and an unreachable API → transient; an item without a prompt →
// permanent. One process answers them all, and writes nothing else on
// stdout.
func TestPythonExampleHandlerAnswers(t *testing.T) {
	api, url := exampleAPI(t, fakeapi.Config{RateHeaders: "openai"}, ratelimit.Limit{})
	if err := api.Revoke("key-1", true); err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String() + "/v1/chat/completions"
	closed.Close()

	type exchange struct {
		name   string
		secret string
		item   string
		check  func(a map[string]any) bool
	}
	keyA, keyB := e2etest.Secrets["key-a"], e2etest.Secrets["key-b"]
	exchanges := []exchange{
		{"200: ok, output the reply, cost usage.total_tokens", keyA, `{"id":"a","prompt":"Say hi","params":{"actual_tokens":42}}`,
			func(a map[string]any) bool {
				out, _ := a["output"].(map[string]any)
				echo, _ := out["echo"].(map[string]any)
				msgs, _ := echo["messages"].([]any)
				return a["status"] == "ok" && a["cost"] == float64(42) && out["key_label"] == "key-0" &&
					echo["model"] == "gpt-4o-mini" && len(msgs) == 1
			}},
		{"200 with messages and a model", keyA, `{"id":"b","model":"m-1","messages":[{"role":"user","content":"x"}]}`,
			func(a map[string]any) bool {
				out, _ := a["output"].(map[string]any)
				echo, _ := out["echo"].(map[string]any)
				return a["status"] == "ok" && echo["model"] == "m-1" && a["cost"] == float64(1)
			}},
		{"429 with Retry-After", keyA, `{"id":"c","prompt":"x","params":{"retry_after":"7"}}`,
			func(a map[string]any) bool {
				h, _ := a["headers"].(map[string]any)
				// The forced 429 says Retry-After alone: the handler passes
				// on what the API said, and makes up nothing.
				_, made := h["retry-after-ms"]
				return a["status"] == "rate_limited" && h["retry-after"] == "7" && !made
			}},
		{"429 insufficient_quota", keyA, `{"id":"d","prompt":"x","params":{"insufficient_quota":true}}`,
			func(a map[string]any) bool {
				return a["status"] == "rejected" && strings.Contains(fmt.Sprint(a["error"]), "exceeded your current quota")
			}},
		{"401 revoked key", keyB, `{"id":"e","prompt":"x"}`,
			func(a map[string]any) bool {
				return a["status"] == "rejected" && strings.Contains(fmt.Sprint(a["error"]), "HTTP 401: Incorrect API key")
			}},
		{"403 content rule", keyA, `{"id":"f","prompt":"x","params":{"refuse":true}}`,
			func(a map[string]any) bool {
				return a["status"] == "permanent" && strings.Contains(fmt.Sprint(a["error"]), "HTTP 403")
			}},
		{"400", keyA, `{"id":"g","prompt":"x","params":{"force_status":400}}`,
			func(a map[string]any) bool { return a["status"] == "permanent" }},
		{"503", keyA, `{"id":"h","prompt":"x","params":{"force_status":503}}`,
			func(a map[string]any) bool {
				return a["status"] == "transient" && strings.Contains(fmt.Sprint(a["error"]), "HTTP 503")
			}},
		{"no prompt", keyA, `{"id":"i"}`,
			func(a map[string]any) bool {
				return a["status"] == "permanent" && strings.Contains(fmt.Sprint(a["error"]), "prompt")
			}},
		{"200 after all that, same process", keyA, `{"id":"j","prompt":"again"}`,
			func(a map[string]any) bool { return a["status"] == "ok" }},
	}
	run := func(t *testing.T, apiURL string, exchanges []exchange) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, e2etest.Python3(t), examplePath(t, "handler.py"))
		cmd.Env = append(os.Environ(), "EXAMPLE_API_URL="+apiURL, "EXAMPLE_TIMEOUT=10")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		answers := bufio.NewScanner(stdout)
		for i, ex := range exchanges {
			var item json.RawMessage = []byte(ex.item)
			line, _ := json.Marshal(map[string]any{"id": fmt.Sprint(i), "batch": "b", "attempt": 1, "credential_id": "k",
				"secret": ex.secret, "item": item})
			if _, err := stdin.Write(append(line, '\n')); err != nil {
				t.Fatalf("%s: %v; stderr:\n%s", ex.name, err, stderr.String())
			}
			if !answers.Scan() {
				t.Fatalf("%s: no answer (%v); stderr:\n%s", ex.name, answers.Err(), stderr.String())
			}
			var a map[string]any
			if err := json.Unmarshal(answers.Bytes(), &a); err != nil || !ex.check(a) || a["id"] != fmt.Sprint(i) {
				t.Errorf("%s: answer %s (%v)", ex.name, answers.Bytes(), err)
			}
			if strings.Contains(answers.Text(), ex.secret) {
				t.Errorf("%s: the answer holds the secret", ex.name)
			}
		}
		stdin.Close()
		if rest, _ := io.ReadAll(stdout); len(rest) != 0 {
			t.Errorf("more on stdout after the answers: %q", rest)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("the handler exited with %v at the end of its stdin; stderr:\n%s", err, stderr.String())
		}
	}
	t.Run("fakeapi", func(t *testing.T) { run(t, url, exchanges) })
	t.Run("unreachable API", func(t *testing.T) {
		run(t, deadURL, []exchange{{"connection refused", keyA, `{"id":"x","prompt":"x"}`,
			func(a map[string]any) bool {
				return a["status"] == "transient" && strings.Contains(fmt.Sprint(a["error"]), "Connection")
			}}})
	})
}

// Through the binaries: 60 items on 2 workers × 2 slots with the example
// handler, one of the two keys revoked. The revoked key is disabled by
// the API's evidence, every item succeeds on the other one with the
// API's reply as output, the rate limit of the good key (20 requests a
// second, which keyfleet is not told: 429s with retry-after-ms) only
// slows things down, and the tokens the API reports are what the good
// key's cost limit counts.
func TestPythonExampleHandlerFleet(t *testing.T) {
	api, url := exampleAPI(t, fakeapi.Config{RateHeaders: "openai"}, ratelimit.Limit{N: 20, Period: time.Second})
	if err := api.Revoke("key-0", true); err != nil {
		t.Fatal(err)
	}
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Pool: "cost: {field: cost, default: 1}",
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}
- {id: key-b, secret_env: KEY_B, max_concurrent: 2, limits: [{cost: 1000000/h}]}`,
		Worker: "concurrency: 2\nretry_backoff: [100ms]",
		Jobs: fmt.Sprintf(`exec:
  command: [%q, %q]
  persistent: true
  timeout: 30s`, e2etest.Python3(t), examplePath(t, "handler.py")),
		// The worker passes OPENAI_BASE_URL on to its handlers, as any
		// variable but its own KEYFLEET_* ones and the keys' secret_env.
		Env: []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"],
			"OPENAI_BASE_URL=" + strings.TrimSuffix(url, "/chat/completions")},
	})
	const n = 60
	f.Publish("llm", "exec", n, func(id string) string {
		return fmt.Sprintf(`{"id":%q,"prompt":"Summarise %s","params":{"actual_tokens":17}}`, id, id)
	})
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	results := f.WaitResults("llm", n, 2*time.Minute)
	e2etest.StopWorkers(t, 30*time.Second, w1, w2)
	for id, r := range results {
		var out struct {
			KeyLabel string `json:"key_label"`
			Usage    struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
			Echo struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			} `json:"echo"`
		}
		if r.Outcome != kftype.OutcomeSucceeded || r.CredentialID != "key-b" || json.Unmarshal([]byte(r.Output), &out) != nil ||
			out.KeyLabel != "key-1" || out.Usage.TotalTokens != 17 || len(out.Echo.Messages) != 1 || out.Echo.Messages[0].Content != "Summarise "+id {
			t.Errorf("%s: %s on %s, output %q, error %q", id, r.Outcome, r.CredentialID, r.Output, r.Error)
		}
	}
	st, err := f.Pool().Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		if c.ID == "key-a" && (c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByAPI) {
			t.Errorf("the revoked key: %+v, want disabled by the API", c)
		}
		if c.ID != "key-b" {
			continue
		}
		if c.State == creds.StateDisabled {
			t.Errorf("the good key was disabled: %+v", c)
		}
		// Each item was estimated at 1 and used 17 tokens; a rate-limited
		// run reports none, and its estimate may stay counted.
		limited := api.Stats().Keys[1].RateLimited
		if len(c.Limits) != 1 || c.Limits[0].Used < n*17 || c.Limits[0].Used > n*17+limited {
			t.Errorf("the good key's cost limit counts %+v, want %d tokens (+ up to %d rate-limited runs)", c.Limits, n*17, limited)
		}
		t.Logf("key-b: %d 429s from the API; cost limit %+v", limited, c.Limits)
	}
	t.Logf("the revoked key got %d requests before it was disabled", api.Stats().Keys[0].Refused)
	if c := e2etest.CountSecrets(f.Logs()); c != 0 {
		t.Errorf("the logs hold a secret %d times", c)
	}
}

// producer.py against `producer dashboard`: it enqueues a file over HTTP,
// prints the progress, writes the results and exits 0; again for the
// same batch it adds nothing; a batch with a failed item exits 1; a wrong
// token is an API error (exit 2) naming the status (401 or 403).
func TestPythonExampleProducer(t *testing.T) {
	_, url := exampleAPI(t, fakeapi.Config{}, ratelimit.Limit{})
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}
- {id: key-b, secret_env: KEY_B, max_concurrent: 2}`,
		Worker: "concurrency: 2\nretry_backoff: [100ms]",
		Jobs: fmt.Sprintf(`exec:
  command: [%q, %q]
  persistent: true
  timeout: 30s
  env: {KEYFLEET_EXAMPLE_API_URL: %q}`, e2etest.Python3(t), examplePath(t, "handler.py"), url),
		Env: []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
	const token = "e2e-admin-token-0123456789"
	_, base := f.StartDashboard("dashboard", []string{"KF_ADMIN=" + token}, "--admin-token-env", "KF_ADMIN")
	w := f.StartWorker("w1")
	defer e2etest.StopWorkers(t, 30*time.Second, w)

	var good, bad strings.Builder
	const n = 20
	for i := range n {
		fmt.Fprintf(&good, `{"id":"p-%02d","prompt":"Summarise %d"}`+"\n", i, i)
		fmt.Fprintf(&bad, `{"id":"p-%02d","prompt":"Summarise %d"}`+"\n", i, i)
	}
	fmt.Fprintf(&bad, `{"id":"broken","prompt":"x","params":{"force_status":400}}`+"\n")
	f.WriteFile("good.jsonl", good.String())
	f.WriteFile("bad.jsonl", bad.String())

	producer := func(tokenValue, batch, file string) (int, string, []kftype.Result) {
		t.Helper()
		out := filepath.Join(f.Dir, batch+".results.jsonl")
		_ = os.Remove(out)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, e2etest.Python3(t), examplePath(t, "producer.py"), "--url", base, "--token-env", "KF_TOKEN",
			"--kind", "exec", "--batch", batch, filepath.Join(f.Dir, file), "-o", out)
		cmd.Env = append(os.Environ(), "KF_TOKEN="+tokenValue)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("producer.py: %v", err)
		}
		var rs []kftype.Result
		if b, err := os.ReadFile(out); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var r kftype.Result
				if json.Unmarshal([]byte(l), &r) == nil && r.Item != "" {
					rs = append(rs, r)
				}
			}
		}
		return code, stderr.String(), rs
	}

	code, says, rs := producer(token, "py-good", "good.jsonl")
	if code != 0 || len(rs) != n || !strings.Contains(says, fmt.Sprintf("py-good: %d items, %d new, 0 already enqueued", n, n)) ||
		!strings.Contains(says, fmt.Sprintf("%d/%d done (%d succeeded, 0 failed", n, n, n)) {
		t.Fatalf("good batch: exit %d, %d results; stderr:\n%s", code, len(rs), says)
	}
	for _, r := range rs {
		if r.Outcome != kftype.OutcomeSucceeded || !strings.Contains(r.Output, `"usage"`) {
			t.Errorf("%s: %s %q %q", r.Item, r.Outcome, r.Output, r.Error)
		}
	}
	if code, says, rs = producer(token, "py-good", "good.jsonl"); code != 0 || len(rs) != n ||
		!strings.Contains(says, fmt.Sprintf("py-good: %d items, 0 new, %d already enqueued", n, n)) {
		t.Errorf("the same batch again: exit %d, %d results; stderr:\n%s", code, len(rs), says)
	}
	if code, says, rs = producer(token, "py-bad", "bad.jsonl"); code != 1 || len(rs) != n+1 || !strings.Contains(says, "1 failed") {
		t.Errorf("a batch with a failed item: exit %d (want 1), %d results; stderr:\n%s", code, len(rs), says)
	}
	if code, says, _ = producer("wrong-token-0123456789", "py-wrong", "good.jsonl"); code != 2 ||
		!(strings.Contains(says, "HTTP 401") || strings.Contains(says, "HTTP 403")) {
		t.Errorf("a wrong token: exit %d (want 2); stderr:\n%s", code, says)
	}
	if c := e2etest.CountSecrets(f.Logs()); c != 0 {
		t.Errorf("the logs hold a secret %d times", c)
	}
}
