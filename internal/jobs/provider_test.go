package jobs_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/secret"
)

// strictAPI is the strict stand-in of a provider, recording what reached
// it, with the test key.
func strictAPI(t *testing.T, prov string) (*fakeapi.Server, string) {
	t.Helper()
	api, err := fakeapi.New(fakeapi.Config{Provider: prov, Keys: []fakeapi.Key{{Secret: testSecret}}, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

// A provider kind sends the item's request as it is, to the provider's
// endpoint (or the item's), with the provider's auth and headers and
// nothing of keyfleet's; the reply's usage is the run's cost; an error
// reply's status, body and request ID come back with the error.
func TestProviderRequests(t *testing.T) {
	for _, tc := range []struct {
		provider, body, endpoint, path string
		wantUsage                      func(out jobs.Output) bool
	}{
		{"openai", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_completion_tokens":5}`, "", "/v1/chat/completions",
			func(out jobs.Output) bool {
				return out.Usage.Output == 5 && out.Cost == out.Usage.Input+out.Usage.Output
			}},
		{"openai", `{"model":"text-embedding-3-small","input":"hello there"}`, "/v1/embeddings", "/v1/embeddings",
			func(out jobs.Output) bool { return out.Usage.Output == 0 && out.Cost == out.Usage.Input }},
		{"anthropic", `{"model":"claude-sonnet-4-6","max_tokens":7,"messages":[{"role":"user","content":"Hi"}]}`, "", "/v1/messages",
			func(out jobs.Output) bool { return out.Usage.Output == 7 && out.Cost == out.Usage.Input+7 }},
	} {
		t.Run(tc.provider+tc.path, func(t *testing.T) {
			api, base := strictAPI(t, tc.provider)
			h := newHTTP(t, jobs.HTTPConfig{Provider: tc.provider, URL: base})
			item := jobs.Item{ID: "i-1", Batch: "b", Kind: "chat", Attempt: 1, Payload: []byte(tc.body), Endpoint: tc.endpoint}
			out, err := h.Run(t.Context(), item, testCred)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if out.Status != 200 || out.RequestID == "" || out.Usage == nil || !tc.wantUsage(out) {
				t.Fatalf("status %d request ID %q usage %+v cost %d", out.Status, out.RequestID, out.Usage, out.Cost)
			}
			got := api.Received()
			if len(got) != 1 || got[0].Path != tc.path || string(got[0].Body) != tc.body {
				t.Fatalf("the API got %d requests; the first to %s with %q, want %s with exactly %q", len(got), got[0].Path, got[0].Body, tc.path, tc.body)
			}
			for name := range got[0].Header {
				if strings.HasPrefix(strings.ToLower(name), "x-keyfleet") || strings.EqualFold(name, "Idempotency-Key") {
					t.Errorf("the request carried keyfleet's header %s", name)
				}
			}
		})
	}

	t.Run("an error reply", func(t *testing.T) {
		_, base := strictAPI(t, "openai")
		h := newHTTP(t, jobs.HTTPConfig{Provider: "openai", URL: base})
		item := jobs.Item{ID: "i-2", Batch: "b", Attempt: 1, Payload: []byte(`{"model":"gpt-4o-mini","messages":[],"id":"x"}`)}
		out, err := h.Run(t.Context(), item, testCred)
		if jobs.Classify(err) != jobs.OutcomePermanent || out.Status != 400 || out.RequestID == "" {
			t.Fatalf("%v: status %d, request ID %q", err, out.Status, out.RequestID)
		}
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(out.Body, &body) != nil || body.Error.Message != "Unrecognized request argument supplied: id" {
			t.Fatalf("output %s: want the API's error reply", out.Body)
		}
	})

	t.Run("a key's own base URL", func(t *testing.T) {
		api, base := strictAPI(t, "openai")
		h := newHTTP(t, jobs.HTTPConfig{Provider: "openai", URL: "http://127.0.0.1:9/unused"})
		cred := jobs.Credential{ID: "azure-east", Secret: secret.New(testSecret), URL: base + "/v1"}
		item := jobs.Item{ID: "i-3", Batch: "b", Attempt: 1, Payload: []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)}
		if _, err := h.Run(t.Context(), item, cred); err != nil {
			t.Fatalf("run on the key's own URL: %v", err)
		}
		if got := api.Received(); len(got) != 1 || got[0].Path != "/v1/chat/completions" {
			t.Fatalf("requests %+v", got)
		}
	})
}

// A provider's settings are checked: an unknown provider, an
// openai-compatible kind without url, an endpoint given as url.
func TestProviderSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  jobs.HTTPConfig
		want string
	}{
		{jobs.HTTPConfig{Provider: "gemini"}, `provider: unknown provider "gemini"`},
		{jobs.HTTPConfig{Provider: "openai-compatible"}, "url: must be set for provider openai-compatible"},
		{jobs.HTTPConfig{Provider: "openai", URL: "https://api.openai.com/v1/chat/completions"}, "is an endpoint"},
	} {
		if _, err := jobs.NewHTTP(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// From nothing, or from the generic defaults a config section starts
	// from, the provider's auth.
	c := jobs.HTTPConfig{Provider: "anthropic", Header: jobs.HTTPHeaderDefault, Format: jobs.HTTPFormatDefault}.WithDefaults()
	if c.Header != "x-api-key" || c.Format != "{secret}" {
		t.Errorf("anthropic over the generic defaults: %+v", c)
	}
	c = jobs.HTTPConfig{Provider: "anthropic"}.WithDefaults()
	if c.URL != "https://api.anthropic.com" || c.Header != "x-api-key" || c.Format != "{secret}" ||
		c.Headers["anthropic-version"] != "2023-06-01" || c.ProbeURL != "https://api.anthropic.com/v1/models" {
		t.Errorf("anthropic defaults: %+v", c)
	}
}
