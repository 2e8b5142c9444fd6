package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A streamed reply goes on as it arrives: the caller reads the first
// event while the API has not sent the rest (it sends them only once the
// caller has read the first; a gateway that buffered would never pass
// it on).
func TestStreamPassesAsItArrives(t *testing.T) {
	firstRead := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(200)
		fmt.Fprint(w, `data: {"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":null}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(api.Close)
	h := newHarness(t, setup{openai: []key{{def: creds.Credential{ID: "oa-1", MaxConcurrent: 1}, secret: "sk-oa-secret-0001", url: api.URL}}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/chat/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+appToken)
	done := make(chan error, 1)
	var lines []string
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if lines = append(lines, sc.Text()); len(lines) == 1 {
				close(firstRead)
			}
		}
		done <- sc.Err()
	}()
	if err := testutil.Receive(t, done, time.Minute, "the stream never ended: its first event was held back"); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 6 || lines[len(lines)-2] != "data: [DONE]" {
		t.Fatalf("the stream: %q", lines)
	}
	// The lease settled with the stream's usage as its cost: the key is
	// free again (max_concurrent 1).
	l, err := h.pool.AcquireWith(ctxT(t, time.Minute), creds.Request{Owner: "t", Keys: h.keys["chat"]})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.pool.Release(t.Context(), l)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// The retry decision: a 429 from a key's limits and a refused connection
// go to another key before anything reaches the caller; any other reply
// is the caller's, sent once.
func TestRetryDecision(t *testing.T) {
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-a on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	}))
	t.Cleanup(limited.Close)
	quota := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
	}))
	t.Cleanup(quota.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`)
	}))
	t.Cleanup(broken.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := "http://" + l.Addr().String()
	_ = l.Close() // nothing listens there now: connections are refused

	good := key{def: creds.Credential{ID: "oa-good", MaxConcurrent: 4}, secret: "sk-oa-secret-good"}
	for _, tt := range []struct {
		name       string
		first      string // the first key's URL
		wantStatus int
		wantRetry  string // the metric's cause, "" no retry
	}{
		{"a 429 from the key's limits: another key answers", limited.URL, 200, "rate_limited"},
		{"a refused connection: another key answers", refusing, 200, "refused_connection"},
		{"a spent quota is the caller's", quota.URL, 429, ""},
		{"a 500 is the caller's, sent once", broken.URL, 500, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The first key is the least recently used: the pool tries it first.
			first := key{def: creds.Credential{ID: "oa-first", MaxConcurrent: 4}, secret: "sk-oa-secret-first", url: tt.first}
			h := newHarness(t, setup{openai: []key{first, good}})
			leaseGood, err := h.pool.AcquireWith(ctxT(t, time.Minute), creds.Request{Owner: "t", Keys: mustKeys(t, "oa-good")})
			if err != nil {
				t.Fatal(err)
			}
			_ = h.pool.Release(t.Context(), leaseGood) // oa-good used last: oa-first is picked first
			got := h.post("/chat/v1/chat/completions", chatBody, bearer(appToken)...)
			if got.status != tt.wantStatus {
				t.Fatalf("%d %s, want %d", got.status, got.body, tt.wantStatus)
			}
			retried := metricValue(t, h, "keyfleet_gateway_retries_total", `cause="`+tt.wantRetry+`"`)
			if tt.wantRetry != "" && retried != 1 || tt.wantRetry == "" && metricValue(t, h, "keyfleet_gateway_retries_total", "") != 0 {
				t.Fatalf("retries by cause %q: %v", tt.wantRetry, retried)
			}
			if n := len(received(h.oa)); tt.wantStatus == 200 && n != 1 || tt.wantStatus != 200 && n != 0 {
				t.Fatalf("the good key's API got %d requests", n)
			}
			if tt.wantRetry == "rate_limited" {
				// The key rests for its Retry-After, fleet-wide.
				st, err := h.pool.Stats(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range st.Credentials {
					if c.ID == "oa-first" && (c.State != creds.StateCooling || c.RestCause != "Retry-After header") {
						t.Fatalf("oa-first after its 429: %+v", c)
					}
				}
			}
		})
	}
}

// An API whose clock is 30 s behind ours names its reset on its own
// clock: a 429 whose reset is 20 s away there (no limit told, so no
// refill rate) rests the key 20 s here; read on our clock, the reset has
// passed.
func TestRestOnTheAPIsClock(t *testing.T) {
	behind := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().Add(-30 * time.Second).UTC()
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("anthropic-ratelimit-requests-remaining", "0")
		w.Header().Set("anthropic-ratelimit-requests-reset", now.Add(20*time.Second).Format(time.RFC3339))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit."}}`)
	}))
	t.Cleanup(behind.Close)
	first := key{def: creds.Credential{ID: "an-first", MaxConcurrent: 4}, secret: "sk-ant-secret-first", url: behind.URL}
	good := key{def: creds.Credential{ID: "an-good", MaxConcurrent: 4}, secret: "sk-ant-secret-good"}
	h := newHarness(t, setup{anthropic: []key{first, good}})
	leaseGood, err := h.pool.AcquireWith(ctxT(t, time.Minute), creds.Request{Owner: "t", Keys: mustKeys(t, "an-good")})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.pool.Release(t.Context(), leaseGood) // an-good used last: an-first is picked first
	if got := h.post("/claude/v1/messages", claudeBody, apiKey(appToken)...); got.status != 200 {
		t.Fatalf("%d %s", got.status, got.body)
	}
	st, err := h.pool.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		if c.ID != "an-first" {
			continue
		}
		// The reset is in whole seconds, as is the Date that tells the skew.
		if rest := time.Until(c.CoolingUntil); c.State != creds.StateCooling || rest < 17*time.Second || rest > 22*time.Second {
			t.Fatalf("an-first rests %v after its 429: %+v", rest, c)
		}
		return
	}
	t.Fatal("an-first is not in the pool's stats")
}

func mustKeys(t *testing.T, ids ...string) *creds.KeySet {
	t.Helper()
	k, err := creds.NewKeySet(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// No key within max_wait: a 429 in the provider's shape, with Retry-After
// when the pool expects room, and the cause.
func TestNoKeyWithinMaxWait(t *testing.T) {
	h := newHarness(t, setup{maxWait: 300 * time.Millisecond,
		openai: []key{{def: creds.Credential{ID: "oa-1", MaxConcurrent: 4, Rate: "1/m"}, secret: "sk-oa-secret-0001"}}})
	if got := h.post("/chat/v1/chat/completions", chatBody, bearer(appToken)...); got.status != 200 {
		t.Fatalf("first: %d %s", got.status, got.body)
	}
	got := h.post("/chat/v1/chat/completions", chatBody, bearer(appToken)...)
	if got.status != http.StatusTooManyRequests {
		t.Fatalf("second: %d %s, want 429", got.status, got.body)
	}
	typ, msg := checkShape(t, got.body, false)
	ra, err := strconv.Atoi(got.header.Get("Retry-After"))
	if typ != "requests" || !strings.Contains(msg, "no key of kind chat could take the request within 300ms") ||
		!strings.Contains(msg, "the pool expects room in") || err != nil || ra < 1 || ra > 60 {
		t.Fatalf("429: Retry-After %q, %s", got.header.Get("Retry-After"), got.body)
	}
	if n := len(received(h.oa)); n != 1 {
		t.Fatalf("the API got %d requests, want 1", n)
	}
	// Anthropic's shape for its kinds.
	h2 := newHarness(t, setup{maxWait: 200 * time.Millisecond,
		anthropic: []key{{def: creds.Credential{ID: "an-1", MaxConcurrent: 4, Rate: "1/m"}, secret: "sk-ant-secret-0001"}}})
	_ = h2.post("/claude/v1/messages", claudeBody, apiKey(appToken)...)
	got = h2.post("/claude/v1/messages", claudeBody, apiKey(appToken)...)
	if typ, _ := checkShape(t, got.body, true); got.status != 429 || typ != "rate_limit_error" {
		t.Fatalf("Anthropic: %d %s", got.status, got.body)
	}
}

// Key safety: a 401 from the API is the caller's, and evidence about
// the key: different requests refused in a row disable it, the same one
// refused again does not count twice.
func TestRefusalsAreEvidence(t *testing.T) {
	h := newHarness(t, setup{})
	if err := h.oa.Revoke("key-0", true); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		body := chatBody
		if i > 0 {
			body = strings.Replace(chatBody, "Say hello.", fmt.Sprintf("Say hello %d.", i), 1)
		}
		if i == 1 {
			body = chatBody // the first one again
		}
		got := h.post("/chat/v1/chat/completions", body, bearer(appToken)...)
		if i < 3 && got.status != http.StatusUnauthorized {
			t.Fatalf("request %d: %d %s, want the API's 401", i, got.status, got.body)
		}
	}
	// Each lease settles once its reply is out: wait for the third's.
	testutil.WaitFor(t, "oa-1, which refused 3 different requests in a row, to be disabled", time.Minute, func() bool {
		st, err := h.pool.Stats(t.Context())
		return err == nil && len(st.Credentials) > 0 && slices.ContainsFunc(st.Credentials, func(c creds.CredentialStats) bool {
			return c.ID == "oa-1" && c.State == creds.StateDisabled
		})
	})
}

// metricValue sums the samples of a metric whose labels contain match.
func metricValue(t *testing.T, h *harness, name, match string) float64 {
	t.Helper()
	mfs, err := h.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if !strings.Contains(strings.Join(labels, ","), match) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// A reply that streams longer than the lease TTL keeps its lease: the
// gateway renews it while the stream lasts, and ends it after.
func TestLongStreamKeepsItsLease(t *testing.T) {
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(api.Close)
	h := newHarness(t, setup{openai: []key{{def: creds.Credential{ID: "oa-1", MaxConcurrent: 1}, secret: "sk-oa-secret-0001", url: api.URL}}})
	done := h.postAsync("/chat/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[]}`, bearer(appToken)...)
	holder := func() (creds.Holder, bool) {
		st, err := h.pool.Stats(t.Context())
		if err != nil || len(st.Credentials) == 0 {
			return creds.Holder{}, false
		}
		for _, c := range st.Credentials {
			if c.ID == "oa-1" && len(c.Holders) == 1 {
				return c.Holders[0], true
			}
		}
		return creds.Holder{}, false
	}
	var first creds.Holder
	testutil.WaitFor(t, "the request to hold the key", time.Minute, func() (ok bool) { first, ok = holder(); return ok })
	// The lease TTL is 3s: renewed every second, its expiry moves on.
	testutil.WaitFor(t, "the lease to be renewed", time.Minute, func() bool {
		h, ok := holder()
		if !ok {
			t.Fatal("the lease ended while the stream lasted")
		}
		return h.Token == first.Token && h.Expires.After(first.Expires.Add(time.Second))
	})
	close(release)
	if got := testutil.Receive(t, done, time.Minute, "no answer"); got.status != 200 || !strings.HasSuffix(got.body, "data: [DONE]\n\n") {
		t.Fatalf("%d %q", got.status, got.body)
	}
	testutil.WaitFor(t, "the lease to end with the stream", time.Minute, func() bool { _, held := holder(); return !held })
}
