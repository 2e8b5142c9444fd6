package gateway_test

import (
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/gateway"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// listFallbacks is gateway.Fallbacks over one list per kind (the worker
// passes fallback.Router, which reads them from the config); it keeps the
// moves counted.
type listFallbacks struct {
	after time.Duration
	to    map[string][]string
	mu    sync.Mutex
	moves []string
}

func (f *listFallbacks) After(kind string) (time.Duration, bool) {
	_, ok := f.to[kind]
	return f.after, ok
}

func (f *listFallbacks) Next(kind, why string, tried ...string) (string, bool) {
	for _, k := range f.to[kind] {
		if !slices.Contains(tried, k) {
			return k, true
		}
	}
	return "", false
}

func (f *listFallbacks) Moved(from, to, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, from+">"+to+":"+why)
}

func (f *listFallbacks) moved() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.moves)
}

// deadURL is the base URL of a listener that was closed: every connection
// to it is refused.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	_ = l.Close()
	return url
}

// A gateway request of a kind with a fallback goes to the fallback kind
// when its own kind's API refuses every connection (two keys in a row),
// or when none of its kind's keys can start it within after; a kind that
// is back takes its requests again.
func TestGatewayFallbacks(t *testing.T) {
	fb := &listFallbacks{after: 300 * time.Millisecond, to: map[string][]string{"primary": {"backup"}}}
	primaryKeys := []key{
		{def: creds.Credential{ID: "p-1", MaxConcurrent: 2}, secret: "sk-primary-0001"},
		{def: creds.Credential{ID: "p-2", MaxConcurrent: 2}, secret: "sk-primary-0002"},
	}
	backupKey := key{def: creds.Credential{ID: "b-1", MaxConcurrent: 2}, secret: "sk-backup-0001"}
	dead := deadURL(t)
	h := newHarness(t, setup{
		openai:    append(append([]key{}, primaryKeys...), backupKey),
		fallbacks: fb,
		kindsFor: func(h *harness) []gateway.Kind {
			return []gateway.Kind{
				{Name: "primary", Provider: "openai", BaseURL: dead, AuthHeader: "Authorization", AuthFormat: "Bearer {secret}",
					Keys: keySet(t, primaryKeys), Timeout: 10 * time.Second},
				{Name: "backup", Provider: "openai-compatible", BaseURL: h.oaURL, AuthHeader: "Authorization", AuthFormat: "Bearer {secret}",
					Keys: keySet(t, []key{backupKey}), Timeout: 10 * time.Second},
			}
		},
	})
	// The primary's API refuses connections: the request moves after two
	// keys refused it, and the backup's key answers.
	r := h.post("/primary/v1/chat/completions", chatBody, bearer(appToken)...)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"object":"chat.completion"`) {
		t.Fatalf("a request whose kind's API is down: %d %s", r.status, r.body)
	}
	got := received(h.oa)
	if len(got) != 1 || !sameBytes(got[0].Body, chatBody) || got[0].Header.Get("Authorization") != "Bearer "+backupKey.secret {
		t.Fatalf("the backup's API got %d requests; want the request once, on the backup's key", len(got))
	}
	if m := fb.moved(); len(m) != 1 || m[0] != "primary>backup:"+kftype.FallbackFailing {
		t.Fatalf("moves counted: %v", m)
	}

	// Every key of the primary held: the request waits after, then moves.
	for _, k := range primaryKeys {
		for range 2 {
			if _, err := h.pool.AcquireWith(t.Context(), creds.Request{Owner: "holder", Keys: keySet(t, []key{k})}); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	r = h.post("/primary/v1/chat/completions", chatBody, bearer(appToken)...)
	if r.status != http.StatusOK {
		t.Fatalf("a request whose kind's keys are all held: %d %s", r.status, r.body)
	}
	if waited := time.Since(start); waited < fb.after {
		t.Fatalf("it moved after %s, before after (%s)", waited, fb.after)
	}
	if m := fb.moved(); len(m) != 2 || m[1] != "primary>backup:"+kftype.FallbackWaited {
		t.Fatalf("moves counted: %v", m)
	}
}

// Without a fallback kind left, a 5xx is the caller's, as before.
func TestGatewayServerErrorWithoutFallback(t *testing.T) {
	h := newHarness(t, setup{})
	r := h.post("/chat/v1/chat/completions",
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"[fake:status=500] hello"}],"max_tokens":20}`, bearer(appToken)...)
	if r.status != http.StatusInternalServerError {
		t.Fatalf("a 5xx without a fallback: got %d %s", r.status, r.body)
	}
}
