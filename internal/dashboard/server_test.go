package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/dashboard"
	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// snapshot reads /api/status.
func snapshot(t *testing.T, rec *recorder, base string) dashboard.Snapshot {
	t.Helper()
	code, body := rec.get(t, base+"/api/status")
	if code != http.StatusOK {
		t.Fatalf("GET /api/status: %d %s", code, body)
	}
	var s dashboard.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/api/status is not a snapshot: %v\n%s", err, body)
	}
	return s
}

func post(t *testing.T, rec *recorder, url, contentType, auth, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return rec.do(t, req)
}

// A read-only dashboard over a real fleet: the page, its assets, the data
// (the status report plus batches and dead letters), the charts, the
// event stream; every write refused; foreign Host names refused; no
// secret in any response.
func TestReadOnlyDashboard(t *testing.T) {
	e := newEnv(t)
	e.startWorker("w1")
	base := e.startDashboard("")
	rec := &recorder{}
	e.enqueue("nightly", "exec", map[string]string{
		"doc-1": `{"id":"doc-1","ms":10}`, "doc-2": `{"id":"doc-2","ms":10}`, "doc-3": `{"id":"doc-3","ms":10}`,
		"doc-bad": `{"id":"doc-bad"}`,
	})
	var s dashboard.Snapshot
	testutil.WaitFor(t, "batch nightly done with 1 failed, its dead letter listed and w1's counts", 60*time.Second, func() bool {
		s = snapshot(t, rec, base)
		return len(s.Batches) == 1 && s.Batches[0].Done == 4 && len(s.DeadLetterList) == 1 &&
			len(s.Workers) == 1 && s.Workers[0].Done == 3 && s.Workers[0].Failed == 1
	})
	b := s.Batches[0]
	if b.ID != "nightly" || b.Kind != "exec" || b.Total != 4 || !b.TotalKnown || b.Succeeded != 3 || b.Failed != 1 || !b.Complete {
		t.Errorf("batch: want nightly, exec, 3 of 4 succeeded, 1 failed, complete; got %+v", b)
	}
	// Read-only: the dead letter's reason (ours), not its error (the job's
	// stderr), and no job text anywhere in the data or the event stream.
	if d := s.DeadLetterList[0]; d.Item != "doc-bad" || d.Reason != "permanent failure" || d.Error != status.Hidden {
		t.Errorf("dead letter: want doc-bad, permanent failure, its error hidden; got %+v", d)
	}
	if _, raw := rec.get(t, base+"/api/status"); strings.Contains(raw, "refused: empty text") {
		t.Errorf("/api/status without the admin token holds the job's stderr:\n%s", raw)
	}
	if s.Pool.Total != 4 || !s.Dashboard.ReadOnly || !s.Dashboard.ResultsCaughtUp || s.Dashboard.Error != "" {
		t.Errorf("want 4 keys, read-only, results caught up, no error; got pool %+v, dashboard %+v", s.Pool, s.Dashboard)
	}

	// Every key of `status --json`, and the dashboard's own.
	_, raw := rec.get(t, base+"/api/status")
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"at", "stream", "consumer", "dead_letters", "results", "workers", "pool", "batches", "dead_letter_list", "dashboard"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/api/status lacks %q", k)
		}
	}
	for _, k := range []string{"id", "kind", "total", "done", "failed", "rate", "eta_seconds", "eta"} {
		if _, ok := m["batches"].([]any)[0].(map[string]any)[k]; !ok {
			t.Errorf("a batch lacks %q", k)
		}
	}

	for path, want := range map[string]string{
		"/":                    "text/html",
		"/static/app.js":       "javascript",
		"/static/style.css":    "text/css",
		"/healthz":             "text/plain",
		"/api/chart?key=key-a": "image/svg+xml",
	} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: want 200 %s, got %d %s", path, want, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: weak or missing CSP %q", path, csp)
		}
		rec.get(t, base+path)
	}
	if code, _ := rec.get(t, base+"/api/chart?key=nope"); code != http.StatusNotFound {
		t.Errorf("chart of an unknown key: want 404, got %d", code)
	}
	// The pool's figures for Prometheus: per key, per limit, and the time
	// each key could not start, by cause.
	testutil.WaitFor(t, "pool metrics with the starts of the batch", 30*time.Second, func() bool {
		_, body := rec.get(t, base+"/metrics")
		return strings.Contains(body, `keyfleet_pool_starts_total{credential="key-a"}`) &&
			strings.Contains(body, `keyfleet_pool_credential_state{credential="key-a",state="available"}`) &&
			strings.Contains(body, "keyfleet_pool_waiting ") && strings.Contains(body, "keyfleet_queue_backlog ")
	})

	// The event stream sends snapshots.
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("/api/events: content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	events := 0
	for events < 2 && sc.Scan() {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev dashboard.Snapshot
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event data: %v", err)
			}
			if strings.Contains(data, "refused: empty text") {
				t.Errorf("an event holds the job's stderr: %s", data)
			}
			events++
			rec.mu.Lock()
			rec.seen = append(rec.seen, line)
			rec.mu.Unlock()
		}
	}
	resp.Body.Close()
	if events < 2 {
		t.Errorf("want 2 events, got %d (%v)", events, sc.Err())
	}

	// Read-only: every write is refused, token or not.
	for _, path := range []string{"/api/creds/disable", "/api/creds/enable", "/api/dlq/replay"} {
		for _, auth := range []string{"", "Bearer whatever-token-you-like"} {
			if code, body := post(t, rec, base+path, "application/json", auth, `{"id":"key-a"}`); code != http.StatusForbidden {
				t.Errorf("read-only POST %s (auth %q): want 403, got %d %s", path, auth, code, body)
			}
		}
	}
	if st, _ := e.pool.Stats(e.ctx); st.Disabled != 0 {
		t.Errorf("a refused write changed the pool: %+v", st)
	}

	// DNS rebinding: a foreign Host name is refused on loopback.
	req, _ = http.NewRequest(http.MethodGet, base+"/api/status", nil)
	req.Host = "attacker.example:8080"
	if code, _ := rec.do(t, req); code != http.StatusMisdirectedRequest {
		t.Errorf("Host attacker.example: want 421, got %d", code)
	}
	req, _ = http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Host = "localhost:8080"
	if code, _ := rec.do(t, req); code != http.StatusOK {
		t.Errorf("Host localhost: want 200, got %d", code)
	}
	rec.scan(t, e.sensitive())
}

// With an admin token, each write needs it as a bearer token, in a JSON
// request from the same origin; then it works. No response shows the token
// or a key's secret.
func TestAdminWrites(t *testing.T) {
	e := newEnv(t)
	token := randomSecret("admin-", 16)
	e.startWorker("w1")
	base := e.startDashboard(token)
	rec := &recorder{}
	e.enqueue("retry-me", "exec", map[string]string{"x-bad": `{"id":"x-bad"}`})
	testutil.WaitFor(t, "the dead letter of x-bad", 60*time.Second, func() bool {
		s := snapshot(t, rec, base)
		return s.DeadLetters == 1 && len(s.DeadLetterList) == 1
	})
	bearer := "Bearer " + token
	// The dead letter's error is the job's text: only with the token.
	getWith := func(auth string) string {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/status", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		_, body := rec.do(t, req)
		return body
	}
	if full := getWith(bearer); !strings.Contains(full, "refused: empty text") {
		t.Errorf("/api/status with the admin token lacks the dead letter's error:\n%s", full)
	}
	for _, auth := range []string{"", "Bearer " + strings.Repeat("y", len(token))} {
		if public := getWith(auth); strings.Contains(public, "refused: empty text") || !strings.Contains(public, status.Hidden) {
			t.Errorf("/api/status with %q shows the job's text (or does not say it is hidden):\n%s", auth, public)
		}
	}
	disable := base + "/api/creds/disable"
	body := `{"id":"key-b","reason":"billing issue"}`

	for _, c := range []struct {
		name, contentType, auth string
		hdr                     []string
		want                    int
	}{
		{"no token", "application/json", "", nil, http.StatusUnauthorized},
		{"wrong token", "application/json", "Bearer " + strings.Repeat("x", len(token)), nil, http.StatusUnauthorized},
		{"token as basic auth", "application/json", "Basic " + token, nil, http.StatusUnauthorized},
		{"a form post", "application/x-www-form-urlencoded", bearer, nil, http.StatusUnsupportedMediaType},
		{"plain text", "text/plain", bearer, nil, http.StatusUnsupportedMediaType},
		{"cross-site", "application/json", bearer, []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"another origin", "application/json", bearer, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
	} {
		code, resp := post(t, rec, disable, c.contentType, c.auth, body, c.hdr...)
		if code != c.want {
			t.Errorf("%s: want %d, got %d %s", c.name, c.want, code, resp)
		}
	}
	if st, _ := e.pool.Stats(e.ctx); st.Disabled != 0 {
		t.Fatalf("a refused write changed the pool: %+v", st)
	}

	state := func(id string) creds.CredentialStats {
		st, err := e.pool.Stats(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Credentials {
			if c.ID == id {
				return c
			}
		}
		t.Fatalf("no %s in the pool", id)
		return creds.CredentialStats{}
	}
	if code, resp := post(t, rec, disable, "application/json; charset=utf-8", bearer, body, "Sec-Fetch-Site", "same-origin"); code != http.StatusOK {
		t.Fatalf("disable with the token: %d %s", code, resp)
	}
	if c := state("key-b"); c.State != creds.StateDisabled || c.DisabledReason != "billing issue" {
		t.Errorf("key-b: want disabled for billing issue, got %+v", c)
	}
	if code, resp := post(t, rec, base+"/api/creds/enable", "application/json", bearer, `{"id":"key-b"}`); code != http.StatusOK {
		t.Fatalf("enable: %d %s", code, resp)
	}
	if c := state("key-b"); c.State == creds.StateDisabled {
		t.Errorf("key-b still disabled: %+v", c)
	}
	if code, _ := post(t, rec, base+"/api/creds/enable", "application/json", bearer, `{"id":"key-zz"}`); code != http.StatusNotFound {
		t.Errorf("enable an unknown key: want 404, got %d", code)
	}
	if code, _ := post(t, rec, base+"/api/creds/enable", "application/json", bearer, `{"id":"key-b","extra":1}`); code != http.StatusBadRequest {
		t.Errorf("unknown field: want 400, got %d", code)
	}

	replay := base + "/api/dlq/replay"
	if code, resp := post(t, rec, replay, "application/json", bearer, `{"batch":"retry-me","items":["x-bad","nope"]}`); code != http.StatusNotFound || !strings.Contains(resp, "nope") {
		t.Errorf("replay with an unknown item: want 404 naming it, got %d %s", code, resp)
	}
	if n := e.deadLetters(); n != 1 {
		t.Errorf("a refused replay changed the dead letters: %d, want 1", n)
	}
	code, resp := post(t, rec, replay, "application/json", bearer, `{"batch":"retry-me","items":["x-bad"]}`)
	if code != http.StatusOK || !strings.Contains(resp, `"replayed":1`) {
		t.Fatalf("replay: %d %s", code, resp)
	}
	// It fails again (the script refuses it): a new record, a new result.
	testutil.WaitFor(t, "x-bad to run again and come back as a dead letter", 60*time.Second, func() bool {
		s := snapshot(t, rec, base)
		return len(s.Workers) == 1 && s.Workers[0].Failed == 2 && len(s.DeadLetterList) == 1
	})
	rec.scan(t, e.sensitive(token))
}
