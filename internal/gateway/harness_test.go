package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/gateway"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The gateway in-process: a real Redis and pool, the strict stand-ins of
// both providers behind httptest servers, the gateway behind another.

const (
	appToken = "gw-token-app-0001"
	opsToken = "gw-token-ops-0002"
)

// key is one key of a harness: its pool definition, secret, own URL.
type key struct {
	def    creds.Credential
	secret string
	url    string // "" the kind's
}

// setup shapes a harness.
type setup struct {
	// openai and anthropic are the keys of kinds chat and claude (default
	// one key each, max_concurrent 4).
	openai, anthropic []key
	// maxWait is gateway.max_wait (default 10s).
	maxWait time.Duration
	// prices and budgets (by tenant) for spend.
	prices  spend.Prices
	budgets map[string]spend.Budget
	// more kinds beside chat and claude; kindsFor more still, made once
	// the stand-ins listen.
	kinds    []gateway.Kind
	kindsFor func(h *harness) []gateway.Kind
	// fallbacks: gateway.Config.Fallbacks (nil: none).
	fallbacks gateway.Fallbacks
}

type harness struct {
	t       *testing.T
	oa, an  *fakeapi.Server // the stand-ins (Record on)
	oaURL   string
	anURL   string
	pool    *creds.Pool
	ledger  *spend.Ledger
	metrics *metrics.Metrics
	gw      *gateway.Gateway
	url     string // the gateway's base URL
	keys    map[string]*creds.KeySet
}

func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	if s.openai == nil {
		s.openai = []key{{def: creds.Credential{ID: "oa-1", MaxConcurrent: 4}, secret: "sk-oa-secret-0001"}}
	}
	if s.anthropic == nil {
		s.anthropic = []key{{def: creds.Credential{ID: "an-1", MaxConcurrent: 4}, secret: "sk-ant-secret-0001"}}
	}
	h := &harness{t: t, metrics: metrics.New()}
	h.oa, h.oaURL = strictAPI(t, fakeapi.ProviderOpenAI, s.openai)
	h.an, h.anURL = strictAPI(t, fakeapi.ProviderAnthropic, s.anthropic)
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	var defs []creds.Credential
	var ids []string
	secrets, urls := map[string]secret.Secret{}, map[string]string{}
	var all []secret.Secret
	for _, k := range append(append([]key{}, s.openai...), s.anthropic...) {
		defs = append(defs, k.def)
		ids = append(ids, k.def.ID)
		secrets[k.def.ID] = secret.New(k.secret)
		all = append(all, secrets[k.def.ID])
		if k.url != "" {
			urls[k.def.ID] = k.url
		}
	}
	pool, err := creds.New(rdb, redistest.UniqueName(t), creds.WithOnly(ids...), creds.WithLeaseTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	if err := pool.Define(context.Background(), creds.Definitions{Credentials: defs}); err != nil {
		t.Fatal(err)
	}
	h.pool = pool
	h.keys = map[string]*creds.KeySet{"chat": keySet(t, s.openai), "claude": keySet(t, s.anthropic)}
	kinds := append([]gateway.Kind{
		{Name: "chat", Provider: "openai", BaseURL: h.oaURL, AuthHeader: "Authorization", AuthFormat: "Bearer {secret}",
			Keys: h.keys["chat"], Timeout: 20 * time.Second},
		{Name: "claude", Provider: "anthropic", BaseURL: h.anURL, AuthHeader: "x-api-key", AuthFormat: "{secret}",
			ProviderHeaders: map[string]string{"anthropic-version": "2023-06-01"}, Keys: h.keys["claude"], Timeout: 20 * time.Second},
	}, s.kinds...)
	if s.kindsFor != nil {
		kinds = append(kinds, s.kindsFor(h)...)
	}
	if s.maxWait == 0 {
		s.maxWait = 10 * time.Second
	}
	h.ledger = spend.NewLedger(rdb, redistest.UniqueName(t))
	gw, err := gateway.New(gateway.Config{
		ID: "w1", Kinds: kinds, MaxWait: s.maxWait, Pool: pool, LeaseTTL: 3 * time.Second,
		Tokens:  []gateway.Token{{Token: secret.New(appToken), Tenant: "support"}, {Token: secret.New(opsToken)}},
		Secrets: secrets, URLs: urls, Scrub: secret.NewScrubber(all...),
		Judging: executor.ReplyJudging{Cooldown: time.Minute, MaxRest: time.Hour},
		Ledger:  h.ledger, Prices: s.prices, Budgets: s.budgets,
		Metrics: h.metrics, Logger: zaptest.NewLogger(t), Fallbacks: s.fallbacks,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.gw = gw
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	t.Cleanup(gw.Wait)
	h.url = srv.URL
	return h
}

func keySet(t *testing.T, ks []key) *creds.KeySet {
	t.Helper()
	var ids []string
	for _, k := range ks {
		ids = append(ids, k.def.ID)
	}
	s, err := creds.NewKeySet(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// strictAPI starts a strict stand-in of provider taking keys, recording
// what reaches it.
func strictAPI(t *testing.T, provider string, keys []key) (*fakeapi.Server, string) {
	t.Helper()
	var fk []fakeapi.Key
	for _, k := range keys {
		fk = append(fk, fakeapi.Key{Secret: k.secret})
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: provider, Keys: fk, Record: true, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

// reply is an answer the gateway gave.
type reply struct {
	status int
	header http.Header
	body   string
}

// post sends body to the gateway's path with headers (name, value, ...).
func (h *harness) post(path, body string, headers ...string) reply {
	h.t.Helper()
	r, err := h.send(path, body, headers...)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// postAsync is post from another goroutine: its reply comes on the
// channel (status -1 and the error as its body when it failed).
func (h *harness) postAsync(path, body string, headers ...string) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		r, err := h.send(path, body, headers...)
		if err != nil {
			r = reply{status: -1, body: err.Error()}
		}
		out <- r
	}()
	return out
}

func (h *harness) send(path, body string, headers ...string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
}

// bearer and apiKey are the SDKs' ways of sending a token.
func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
func apiKey(tok string) []string {
	return []string{"x-api-key", tok, "anthropic-version", "2023-06-01"}
}

const (
	chatBody   = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"max_tokens":20}`
	claudeBody = `{"model":"claude-sonnet-4-6","max_tokens":20,"messages":[{"role":"user","content":"Say hello."}]}`
)

// received is every request a stand-in got.
func received(api *fakeapi.Server) []fakeapi.Received { return api.Received() }

func sameBytes(a []byte, b string) bool { return bytes.Equal(a, []byte(b)) }
