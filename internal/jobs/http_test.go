package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func newHTTP(t *testing.T, cfg jobs.HTTPConfig) jobs.Handler {
	t.Helper()
	h, err := jobs.NewHTTP(cfg)
	return built(t, jobs.KindHTTP, h, err)
}

// serve starts an httptest server running fn.
func serve(t *testing.T, fn http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(fn)
	t.Cleanup(srv.Close)
	return srv.URL
}

// hang returns a handler that reads the request and then waits for the
// client to go away or the test to end (httptest's Close waits for
// running handlers).
func hang(t *testing.T, before func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	release := t.Context().Done() // closed before the server's Close runs
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if before != nil {
			before(w, r)
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"answer":42}`)
	})
	h := newHTTP(t, jobs.HTTPConfig{
		URL:     url + "/v1/x",
		Method:  http.MethodPut,
		Header:  "X-Api-Key",
		Format:  "Key {secret}!",
		Headers: map[string]string{"X-Tenant": "acme", "content-type": "application/vnd.acme+json"},
	})
	out, err := h.Run(t.Context(), testItem, testCred)
	if err != nil || string(out.Body) != `{"answer":42}` || out.Truncated {
		t.Fatalf("Run: %q, %v, %v", out.Body, out.Truncated, err)
	}
	r, body := <-got, <-bodies
	if string(body) != string(testItem.Payload) {
		t.Errorf("body %q, want the payload %q", body, testItem.Payload)
	}
	if r.Method != http.MethodPut || r.URL.Path != "/v1/x" {
		t.Errorf("request %s %s", r.Method, r.URL.Path)
	}
	want := map[string]string{
		"X-Api-Key":          "Key " + testSecret + "!",
		"Authorization":      "",
		"Content-Type":       "application/vnd.acme+json",
		"X-Tenant":           "acme",
		"X-Keyfleet-Item":    "item-7",
		"X-Keyfleet-Batch":   "batch-1",
		"X-Keyfleet-Attempt": "3",
		"Idempotency-Key":    "batch-1/item-7",
	}
	for name, v := range want {
		if got := r.Header.Get(name); got != v {
			t.Errorf("header %s = %q, want %q", name, got, v)
		}
	}
}

func TestHTTPDefaults(t *testing.T) {
	t.Parallel()
	var auth, ctype, method atomic.Value
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		ctype.Store(r.Header.Get("Content-Type"))
		method.Store(r.Method)
	})
	h := newHTTP(t, jobs.HTTPConfig{URL: url})
	if _, err := h.Run(t.Context(), testItem, testCred); err != nil {
		t.Fatal(err)
	}
	if auth.Load() != "Bearer "+testSecret || ctype.Load() != "application/json" || method.Load() != "POST" {
		t.Errorf("defaults: %v %v %v", method.Load(), auth.Load(), ctype.Load())
	}
}

// fakeAPI starts a fakeapi server with one key, testSecret, limited to
// rate.
func fakeAPI(t *testing.T, rate ratelimit.Limit) (string, *fakeapi.Server) {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Keys: []fakeapi.Key{{Secret: testSecret, Rate: rate}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv.URL, api
}

func TestHTTPAgainstFakeAPI(t *testing.T) {
	t.Parallel()
	url, api := fakeAPI(t, ratelimit.Limit{N: 1, Period: time.Hour})
	h := newHTTP(t, jobs.HTTPConfig{URL: url})
	run := func(payload string, cred jobs.Credential) (jobs.Output, error) {
		item := testItem
		item.Payload = []byte(payload)
		out, err := h.Run(t.Context(), item, cred)
		noSecret(t, err)
		return out, err
	}

	out, err := run(`{"id":"a"}`, testCred)
	var reply struct {
		OK   bool            `json:"ok"`
		Echo json.RawMessage `json:"echo"`
	}
	if err != nil || json.Unmarshal(out.Body, &reply) != nil || !reply.OK || string(reply.Echo) != `{"id":"a"}` {
		t.Fatalf("200: %s, %v", out.Body, err)
	}

	// The key's one request an hour is spent.
	_, err = run(`{"id":"b"}`, testCred)
	var rl *jobs.RateLimitedError
	if !errors.As(err, &rl) || rl.Source != "Retry-After header" || rl.RetryAfter <= 59*time.Minute || rl.RetryAfter > time.Hour {
		t.Errorf("429: %v, want rate limited for ~1h from the Retry-After header", err)
	}

	tests := []struct {
		name     string
		payload  string
		cred     jobs.Credential
		want     jobs.Outcome
		contains string
	}{
		{"unknown key", `{}`, jobs.Credential{ID: "k", Secret: secret.New("sk-wrong-key")}, jobs.OutcomeRejected, "401 Unauthorized"},
		{"403", `{"force_status":403}`, testCred, jobs.OutcomeRejected, "403 Forbidden"},
		{"402", `{"force_status":402}`, testCred, jobs.OutcomeRejected, "402 Payment Required"},
		{"insufficient quota", `{"insufficient_quota":true}`, testCred, jobs.OutcomeRejected, "insufficient quota"},
		{"404", `{"force_status":404}`, testCred, jobs.OutcomePermanent, "404 Not Found"},
		{"422", `{"force_status":422}`, testCred, jobs.OutcomePermanent, "422"},
		{"500", `{"force_status":500}`, testCred, jobs.OutcomeTransient, "500 Internal Server Error"},
		{"503", `{"force_status":503}`, testCred, jobs.OutcomeTransient, "503"},
		{"429 without Retry-After", `{"force_status":429}`, testCred, jobs.OutcomeRateLimited, "429"},
		{"429 too large for the key", `{"too_large":true}`, testCred, jobs.OutcomePermanent, "larger than the key's limit"},
		{"413", `{"force_status":413}`, testCred, jobs.OutcomePermanent, "413"},
		{"refused by a content rule", `{"refuse":true}`, testCred, jobs.OutcomeRejected, "403 Forbidden"},
	}
	for _, tt := range tests {
		_, err := run(tt.payload, tt.cred)
		if got := jobs.Classify(err); got != tt.want || !strings.Contains(err.Error(), tt.contains) {
			t.Errorf("%s: %v (%v), want %v containing %q", tt.name, err, got, tt.want, tt.contains)
		}
		if tt.name == "429 without Retry-After" && errors.As(err, &rl) && (rl.RetryAfter != 0 || rl.Source != "") {
			t.Errorf("%s: RetryAfter %v from %q, want 0 from \"\"", tt.name, rl.RetryAfter, rl.Source)
		}
	}
	if st := api.Stats(); st.OverLimit() != 0 || st.Keys[0].OK != 1 || st.Keys[0].RateLimited != 2 || st.Keys[0].Refused != 1 || st.Unauthorized != 1 {
		t.Errorf("fakeapi stats %+v", st)
	}
}

func TestHTTPRetryAfter(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		header     string
		min, max   time.Duration
		wantSource string
	}{
		{"seconds", "7", 7 * time.Second, 7 * time.Second, "Retry-After header"},
		{"http date", future, 55 * time.Minute, time.Hour, "Retry-After header"},
		{"absent", "", 0, 0, ""},
		{"garbage", "soon", 0, 0, ""},
	}
	for _, tt := range tests {
		url := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if tt.header != "" {
				w.Header().Set("Retry-After", tt.header)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests"}}`)
		})
		_, err := newHTTP(t, jobs.HTTPConfig{URL: url}).Run(t.Context(), testItem, testCred)
		var rl *jobs.RateLimitedError
		if !errors.As(err, &rl) {
			t.Errorf("%s: %v, want rate limited", tt.name, err)
			continue
		}
		if rl.RetryAfter < tt.min || rl.RetryAfter > tt.max || rl.Source != tt.wantSource {
			t.Errorf("%s: RetryAfter %v from %q, want %v..%v from %q", tt.name, rl.RetryAfter, rl.Source, tt.min, tt.max, tt.wantSource)
		}
		if !strings.Contains(rl.Detail, "Rate limit reached") {
			t.Errorf("%s: detail %q lacks the body snippet", tt.name, rl.Detail)
		}
	}
}

func TestHTTPErrorTexts(t *testing.T) {
	t.Parallel()
	// A server that echoes the request headers, secret included, in a
	// long error body.
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "upstream failed; you sent Authorization: "+r.Header.Get("Authorization")+"\n"+strings.Repeat("detail ", 1000))
	})
	_, err := newHTTP(t, jobs.HTTPConfig{URL: url}).Run(t.Context(), testItem, testCred)
	if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "502 Bad Gateway: upstream failed") {
		t.Fatalf("err %v, want transient 502 with a snippet", err)
	}
	noSecret(t, err)
	if !strings.Contains(err.Error(), secret.Redacted) {
		t.Errorf("err %q: the echoed secret should read %s", err, secret.Redacted)
	}
	if len(err.Error()) > 400 {
		t.Errorf("error text is %d bytes, want the snippet bounded", len(err.Error()))
	}
}

func TestHTTPOutputBound(t *testing.T) {
	t.Parallel()
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100_000))
	})
	out, err := newHTTP(t, jobs.HTTPConfig{URL: url, MaxOutput: 1000}).Run(t.Context(), testItem, testCred)
	if err != nil || len(out.Body) != 1000 || !out.Truncated {
		t.Errorf("got %d bytes, truncated %v, %v; want 1000, true", len(out.Body), out.Truncated, err)
	}
	out, err = newHTTP(t, jobs.HTTPConfig{URL: url, MaxOutput: 100_000}).Run(t.Context(), testItem, testCred)
	if err != nil || len(out.Body) != 100_000 || out.Truncated {
		t.Errorf("at the bound: got %d bytes, truncated %v, %v", len(out.Body), out.Truncated, err)
	}
}

func TestHTTPNetworkErrors(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		// A port just closed may be taken by another process before the
		// dial (the tests of other packages run meanwhile): then the dial
		// meets that process, not a refusal. A few fresh ports make a
		// refusal all but certain.
		var err error
		for range 5 {
			l, lerr := net.Listen("tcp", "127.0.0.1:0")
			if lerr != nil {
				t.Fatal(lerr)
			}
			addr := l.Addr().String()
			l.Close()
			_, err = newHTTP(t, jobs.HTTPConfig{URL: "http://" + addr}).Run(t.Context(), testItem, testCred)
			if err != nil && strings.Contains(err.Error(), "refused") {
				break
			}
		}
		if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "refused") {
			t.Errorf("err %v, want transient connection refused", err)
		}
		noSecret(t, err)
	})
	t.Run("timeout", func(t *testing.T) {
		url := serve(t, hang(t, nil))
		_, err := newHTTP(t, jobs.HTTPConfig{URL: url, Timeout: 200 * time.Millisecond}).Run(t.Context(), testItem, testCred)
		if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "timed out after 200ms") {
			t.Errorf("err %v, want transient 'timed out after 200ms'", err)
		}
		noSecret(t, err)
	})
	t.Run("timeout while reading the body", func(t *testing.T) {
		url := serve(t, hang(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", 1000))
			w.(http.Flusher).Flush()
		}))
		_, err := newHTTP(t, jobs.HTTPConfig{URL: url, Timeout: 200 * time.Millisecond}).Run(t.Context(), testItem, testCred)
		if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "timed out") {
			t.Errorf("err %v, want transient timeout", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		arrived := make(chan struct{})
		url := serve(t, hang(t, func(http.ResponseWriter, *http.Request) { close(arrived) }))
		cause := errors.New("lease lost")
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() { <-arrived; cancel(cause) }()
		_, err := newHTTP(t, jobs.HTTPConfig{URL: url}).Run(ctx, testItem, testCred)
		if !errors.Is(err, cause) || jobs.Classify(err) != jobs.OutcomeTransient {
			t.Errorf("err %v, want transient wrapping the cause", err)
		}
	})
	t.Run("redirect is not followed", func(t *testing.T) {
		var followed atomic.Bool
		target := serve(t, func(w http.ResponseWriter, r *http.Request) { followed.Store(true) })
		url := serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
		})
		_, err := newHTTP(t, jobs.HTTPConfig{URL: url}).Run(t.Context(), testItem, testCred)
		if jobs.Classify(err) != jobs.OutcomePermanent || followed.Load() {
			t.Errorf("err %v, followed %v; want permanent, not followed", err, followed.Load())
		}
	})
}

func TestHTTPBadInputs(t *testing.T) {
	t.Parallel()
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHTTP(t, jobs.HTTPConfig{URL: url})
	item := testItem
	item.ID = "a\r\nX-Injected: 1"
	if _, err := h.Run(t.Context(), item, testCred); jobs.Classify(err) != jobs.OutcomePermanent {
		t.Errorf("item id with CRLF: %v, want permanent", err)
	}
	bad := jobs.Credential{ID: "k", Secret: secret.New("sk-abc\nxyz")}
	_, err := h.Run(t.Context(), testItem, bad)
	if jobs.Classify(err) != jobs.OutcomeRejected || strings.Contains(err.Error(), "sk-abc") {
		t.Errorf("secret with a newline: %v, want rejected without the secret", err)
	}
}

func TestNewHTTPErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  jobs.HTTPConfig
		want string
	}{
		{"no url", jobs.HTTPConfig{}, "http: url: must be set"},
		{"bad scheme", jobs.HTTPConfig{URL: "ftp://x/y"}, "scheme"},
		{"no host", jobs.HTTPConfig{URL: "http:///x"}, "host"},
		{"format without secret", jobs.HTTPConfig{URL: "http://x", Format: "Bearer"}, "{secret}"},
		{"bad header", jobs.HTTPConfig{URL: "http://x", Header: "X Key"}, "header"},
		{"bad method", jobs.HTTPConfig{URL: "http://x", Method: "PO ST"}, "method"},
		{"negative timeout", jobs.HTTPConfig{URL: "http://x", Timeout: -1}, "timeout"},
		{"negative max output", jobs.HTTPConfig{URL: "http://x", MaxOutput: -1}, "max output"},
		{"headers override the secret", jobs.HTTPConfig{URL: "http://x", Headers: map[string]string{"authorization": "x"}}, "Authorization"},
		{"headers override idempotency", jobs.HTTPConfig{URL: "http://x", Headers: map[string]string{"Idempotency-Key": "x"}}, "Idempotency-Key"},
		{"headers value", jobs.HTTPConfig{URL: "http://x", Headers: map[string]string{"X-A": "a\nb"}}, "X-A"},
	}
	for _, tt := range tests {
		h, err := jobs.NewHTTP(tt.cfg)
		if err == nil || h != nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: NewHTTP = %v, %v; want an error containing %q", tt.name, h, err, tt.want)
		}
	}
}
