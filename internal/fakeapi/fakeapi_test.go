package fakeapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func start(t *testing.T, cfg fakeapi.Config) (*fakeapi.Server, string) {
	t.Helper()
	api, err := fakeapi.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

type reply struct {
	status     int
	retryAfter string
	body       string
	header     http.Header
}

func post(ctx context.Context, t *testing.T, url, header, value, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if value != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return reply{}
		}
		t.Errorf("POST: %v", err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if !json.Valid(b) {
		t.Errorf("reply is not JSON: %q", b)
	}
	return reply{resp.StatusCode, resp.Header.Get("Retry-After"), strings.TrimSpace(string(b)), resp.Header}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{
		Keys:   []fakeapi.Key{{Secret: "alpha-secret"}, {Secret: "beta-secret"}},
		Header: "X-Api-Key",
		Format: "key={secret};",
	})
	tests := []struct {
		value string
		want  int
		label string
	}{
		{"key=alpha-secret;", 200, "key-0"},
		{"key=beta-secret;", 200, "key-1"},
		{"", 401, ""},
		{"key=gamma-secret;", 401, ""},
		{"key=alpha-secret", 401, ""},
		{"Bearer alpha-secret", 401, ""},
		{"key=;", 401, ""},
	}
	for _, tt := range tests {
		r := post(t.Context(), t, url, "X-Api-Key", tt.value, `{"id":1}`)
		if r.status != tt.want || (tt.label != "" && !strings.Contains(r.body, `"key_label":"`+tt.label+`"`)) {
			t.Errorf("%q: %d %s, want %d (%s)", tt.value, r.status, r.body, tt.want, tt.label)
		}
		if strings.Contains(r.body, "secret") {
			t.Errorf("reply names a secret: %s", r.body)
		}
	}
	st := api.Stats()
	if st.Unauthorized != 5 || st.Keys[0].OK != 1 || st.Keys[1].OK != 1 || st.Keys[1].Label != "key-1" || st.Keys[1].Index != 1 {
		t.Errorf("stats %+v", st)
	}
	if b, _ := json.Marshal(st); strings.Contains(string(b), "secret") {
		t.Errorf("stats show a secret: %s", b)
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "s3cret-key"}}})
	auth := "Bearer s3cret-key"
	r := post(t.Context(), t, url, "Authorization", auth, `{"id":"a","n":[1,2]}`)
	if r.status != 200 || r.body != `{"ok":true,"key_label":"key-0","bytes":20,"usage":{"total_tokens":1},"echo":{"id":"a","n":[1,2]}}` {
		t.Errorf("200: %d %s", r.status, r.body)
	}
	big := `{"blob":"` + strings.Repeat("x", 5000) + `"}`
	if r := post(t.Context(), t, url, "Authorization", auth, big); r.status != 200 || strings.Contains(r.body, "echo") || !strings.Contains(r.body, `"bytes":5011`) {
		t.Errorf("large body: %d %.100s", r.status, r.body)
	}
	tests := []struct {
		body, want string
		status     int
	}{
		{`{"force_status":500}`, `{"forced_status":500}`, 500},
		{`{"force_status":403}`, `{"forced_status":403}`, 403},
		{`{"insufficient_quota":true}`, `{"error":{"code":"insufficient_quota","message":"You exceeded your current quota."}}`, 429},
		{`{"force_status":1000}`, ``, 400},
		{`not json`, `{"error":"invalid_json"}`, 400},
	}
	for _, tt := range tests {
		r := post(t.Context(), t, url, "Authorization", auth, tt.body)
		if r.status != tt.status || (tt.want != "" && r.body != tt.want) {
			t.Errorf("%s: %d %s, want %d %s", tt.body, r.status, r.body, tt.status, tt.want)
		}
	}
	if st := api.Stats().Keys[0]; st.Requests != 7 || st.OK != 2 || st.Forced != 2 || st.Quota != 1 || st.RateLimited != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestRateRetryAfter(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "hourly-key", Rate: ratelimit.Limit{N: 2, Period: time.Hour}}}})
	auth := "Bearer hourly-key"
	for i := range 2 {
		if r := post(t.Context(), t, url, "Authorization", auth, `{}`); r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	r := post(t.Context(), t, url, "Authorization", auth, `{}`)
	// The window frees a little under an hour from now: rounded up, 3600.
	if r.status != 429 || r.retryAfter != "3600" || r.body != `{"error":"rate_limited","limit":"rate"}` {
		t.Errorf("third request: %d Retry-After %q %s; want 429, 3600", r.status, r.retryAfter, r.body)
	}
	if st := api.Stats(); st.Keys[0].RateLimited != 1 || st.OverLimit() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRateUnderLoad hammers one key from many goroutines: exactly N
// requests may succeed in a window far longer than the test.
func TestRateUnderLoad(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{Keys: []fakeapi.Key{{Secret: "busy-key", Rate: ratelimit.Limit{N: 7, Period: time.Hour}}}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 16 {
		wg.Go(func() {
			for range 5 {
				r := post(t.Context(), t, url, "Authorization", "Bearer busy-key", `{}`)
				mu.Lock()
				codes[r.status]++
				mu.Unlock()
				if r.status == 429 {
					if n, err := strconv.Atoi(r.retryAfter); err != nil || n < 1 || n > 3600 {
						t.Errorf("Retry-After %q", r.retryAfter)
					}
				}
			}
		})
	}
	wg.Wait()
	if codes[200] != 7 || codes[429] != 80-7 {
		t.Errorf("statuses %v, want 7×200 and 73×429", codes)
	}
	if st := api.Stats(); st.OverLimit() != 0 || st.Keys[0].OK != 7 || st.Keys[0].RateLimited != 73 {
		t.Errorf("stats %+v", st)
	}
}

// TestSlidingWindowUnderLoad runs a short window with a rate and a
// concurrency limit for a while: requests keep succeeding as the window
// slides, some get 429, and nothing is admitted beyond the limits.
func TestSlidingWindowUnderLoad(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{
		Keys:    []fakeapi.Key{{Secret: "window-key", Rate: ratelimit.Limit{N: 10, Period: 200 * time.Millisecond}, Concurrency: 3}},
		Latency: 2 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if r := post(ctx, t, url, "Authorization", "Bearer window-key", `{}`); r.status == 200 && api.Stats().Keys[0].OK >= 40 {
					cancel()
				}
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
		cancel()
		t.Error("40 requests did not get through in 20s")
	}
	wg.Wait()
	st := api.Stats().Keys[0]
	if st.OverLimit != 0 || st.RateLimited == 0 || st.MaxConcurrent > 3 || st.MaxConcurrent < 1 {
		t.Errorf("stats %+v: want 429s, max concurrency ≤ 3, no over-limit admission", st)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	api, url := start(t, fakeapi.Config{
		Keys:       []fakeapi.Key{{Secret: "narrow-key", Concurrency: 2}},
		Latency:    time.Hour, // admitted requests hold their slot until cancelled
		RetryAfter: 2500 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { post(ctx, t, url, "Authorization", "Bearer narrow-key", `{}`) })
	}
	deadline := time.Now().Add(20 * time.Second)
	for api.Stats().Keys[0].MaxConcurrent < 2 {
		if time.Now().After(deadline) {
			t.Fatal("two requests did not start within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := post(t.Context(), t, url, "Authorization", "Bearer narrow-key", `{}`)
	if r.status != 429 || r.retryAfter != "3" {
		t.Errorf("third concurrent request: %d Retry-After %q; want 429, 3", r.status, r.retryAfter)
	}
	cancel() // the server honours the request context during Latency
	wg.Wait()
	if st := api.Stats(); st.OverLimit() != 0 || st.Keys[0].MaxConcurrent != 2 || st.Keys[0].RateLimited != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	k := fakeapi.Key{Secret: "abc-secret"}
	tests := []struct {
		name string
		cfg  fakeapi.Config
		want string
	}{
		{"no keys", fakeapi.Config{}, "keys"},
		{"empty secret", fakeapi.Config{Keys: []fakeapi.Key{k, {}}}, "keys[1]: secret is empty"},
		{"duplicate", fakeapi.Config{Keys: []fakeapi.Key{k, k}}, "keys[1]: same secret as keys[0]"},
		{"bad rate", fakeapi.Config{Keys: []fakeapi.Key{{Secret: "x", Rate: ratelimit.Limit{N: 0, Period: time.Second}}}}, "keys[0]: rate"},
		{"negative concurrency", fakeapi.Config{Keys: []fakeapi.Key{{Secret: "x", Concurrency: -1}}}, "concurrency"},
		{"format", fakeapi.Config{Keys: []fakeapi.Key{k}, Format: "Bearer"}, "{secret}"},
		{"latency", fakeapi.Config{Keys: []fakeapi.Key{k}, Latency: -1}, "latency"},
	}
	for _, tt := range tests {
		s, err := fakeapi.New(tt.cfg)
		if err == nil || s != nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, %v; want an error containing %q", tt.name, s, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "abc-secret") {
			t.Errorf("%s: error shows the secret: %v", tt.name, err)
		}
	}
}
