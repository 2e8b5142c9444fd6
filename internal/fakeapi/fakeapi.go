// Package fakeapi is a local stand-in for a rate-limited paid API, for tests
// and for `make demo`. It is not a production server.
//
// In the lenient mode (no Config.Provider), each configured key has an
// optional rate (at most N requests admitted in any sliding window of
// length Period, kept exactly in memory: the self-check of keyfleet's own
// exact limits) and an optional concurrency limit. The server answers like
// the APIs keyfleet is built for:
//
//   - no key or an unknown key: 401 {"error":"unauthorized"}
//   - over the key's rate: 429 {"error":"rate_limited"} with Retry-After in
//     whole seconds, rounded up from the exact time until the window admits
//     a request again
//   - over the key's concurrency: 429 {"error":"rate_limited"} with
//     Retry-After from Config.RetryAfter
//   - otherwise, after Config.Latency: 200
//     {"ok":true,"key_label":"key-0","bytes":N,"echo":<the request JSON, if
//     at most 1 KiB>}
//
// Key safety (keysafety.go): a revoked key (Revoke) gets 401 on every
// request; an item with "refuse": true gets 403 whatever the key (a
// content rule); "too_large": true gets OpenAI's 429 "Request too large
// ... Limit N, Requested M"; "retry_after": "<value>" gets a 429 with that
// Retry-After. None of them counts against the key's limits.
//
// For tests of the status mapping, a JSON request body with
// "insufficient_quota": true gets 429 {"error":{"code":"insufficient_quota"}}
// and one with "force_status": <int> gets that status; neither counts
// against the key's limits. A body that is not JSON gets 400.
//
// Per-model limits (Key.Models, models.go): a request whose "model" names
// one of the key's models is counted against that model's request and
// token windows as well as the key's own; over the model's, it gets
// OpenAI's 429 {"error":{"message":"Rate limit reached for <model> in
// organization org-test on tokens per min (TPM): Limit N, Used U,
// Requested R. ...","code":"rate_limit_exceeded"}} with Retry-After, and
// the rate headers describe the model's limits where it has them.
//
// Stats reports per-key figures, keyed by index and label (never by
// secret), including a self-check: OverLimit counts requests admitted
// beyond a key's limits, which must stay 0.
//
// # Strict provider mode
//
// With Config.Provider set to ProviderOpenAI or ProviderAnthropic the
// server is a faithful stand-in for that provider's API (strict.go): it
// refuses what the real API refuses, with the provider's status and error
// body, and answers in the provider's shapes. Each shape's source (the
// providers' OpenAPI spec and SDKs, their documentation, replies quoted
// from the APIs) is cited where it is built.
//
//   - Auth: OpenAI "Authorization: Bearer <key>"; Anthropic "x-api-key:
//     <key>" and "anthropic-version: 2023-06-01" (AnthropicVersion; also
//     2026-10-21, the official Go SDK v2's: AnthropicVersions).
//     Missing, unknown and revoked (Revoke) keys get the provider's 401.
//   - Endpoints: OpenAI POST /v1/chat/completions, POST /v1/embeddings,
//     POST /v1/responses (responses.go; not streamed: "stream": true and a
//     request without input are refused as not served here; the legacy
//     POST /v1/completions is not served), GET /v1/models[/{id}], the Files API (POST/GET /v1/files, GET and
//     DELETE /v1/files/{id}, GET /v1/files/{id}/content) and the Batch API
//     (POST/GET /v1/batches, GET /v1/batches/{id}, POST
//     /v1/batches/{id}/cancel); Anthropic POST /v1/messages, GET
//     /v1/models[/{id}] and Message Batches (POST/GET
//     /v1/messages/batches, GET and DELETE /v1/messages/batches/{id}, POST
//     .../cancel, GET .../results). Any other path: the provider's 404.
//   - Validation: unknown top-level fields (knownFields lists each
//     endpoint's, from the API reference), missing required fields, wrong
//     types, bad messages: 400 with the provider's words, e.g. OpenAI
//     "Unrecognized request argument supplied: id", Anthropic "id: Extra
//     inputs are not permitted". Config.Models, when set, limits the
//     models served (404 otherwise).
//   - Streaming (streaming.go): "stream": true (a boolean) on chat
//     completions and messages gets the reply as server-sent events
//     (Content-Type "text/event-stream; charset=utf-8"), sent as it is
//     made, one event per write and flush: OpenAI's chat.completion.chunk
//     objects (the role, one chunk per word, the finish_reason; with
//     stream_options.include_usage a last chunk with empty choices and the
//     usage; an obfuscation field unless include_obfuscation is false),
//     then "data: [DONE]"; Anthropic's message_start (input tokens),
//     content_block_start, ping, content_block_delta (text_delta) per word,
//     content_block_stop, message_delta (stop_reason, cumulative usage),
//     message_stop, each "event: <type>\ndata: <json>". The opening events
//     go at once; the words and the closing events are spread over the
//     request's latency, so the first arrives before the last. The usage is
//     the non-streamed reply's, and is counted when the last event goes.
//     OpenAI refuses stream_options without "stream": true (400, param
//     stream_options). A refusal (429, markers, validation) comes before
//     the stream, as the usual JSON error. A batch's requests do not
//     stream.
//   - Usage: input tokens are a quarter of the bytes of the request's text
//     (message contents, system, tools; embeddings inputs), rounded up, at
//     least 1, plus one per token given as a number: never more than the
//     body's length. Output tokens are Config.OutputTokens (default
//     DefaultOutputTokens) or the output_tokens marker, capped by
//     max_tokens / max_completion_tokens (per choice with "n"). The reply's
//     text is one 4-byte word per output token. Token limits count input +
//     output; KeyStats.Usage and ModelUsage record what the replies
//     reported, real time apart from Batch API.
//   - Limits (buckets.go, accounts.go, strict_limits.go) are token buckets,
//     as both providers describe theirs: Key.Rate, Key.Tokens and
//     Key.Models, and those of the key's Account (Config.Accounts: an
//     organization, project, workspace or resource whose limits all its
//     keys share), each a bucket of N refilled continuously at N per
//     period. A request needs room in every bucket it draws on (its key's
//     own, the key's for its model, its account's, the account's for its
//     model) and takes its share of all of them, or of none: over one, it
//     gets the provider's 429 naming the organization (the account's ID,
//     "org-test" for a key's own limits), with retry-after (OpenAI also
//     retry-after-ms) the time until it would fit every bucket, rounded
//     up; a request larger than a bucket holds gets OpenAI's "Request too
//     large" without one. Concurrency and Every apply as in the lenient
//     mode. AccountStats count each account's admissions and the 429s its
//     limits gave.
//   - Replies carry x-request-id (OpenAI) or request-id (Anthropic) and the
//     provider's rate-limit headers, of the bucket with the least room for
//     requests and for tokens (the headers of a key of an account report
//     the room its keys share): limit the capacity, remaining the whole
//     units left after the request, reset the time until the bucket is
//     full again, OpenAI's as a Go duration rounded up to the millisecond
//     ("0s" of a full bucket only), Anthropic's as an RFC 3339 time in
//     whole seconds rounded up.
//   - Batches run lazily: each look at a batch (GET, list, cancel) moves it
//     on. A batch's requests are done one by one over Config.BatchDelay
//     from its creation (Server.SetBatchDelay changes it, for running
//     batches too). OpenAI: validating → in_progress → finalizing →
//     completed (one more look), output and error files; Anthropic:
//     in_progress → ended, results as JSON Lines. A cancel runs no more
//     requests; the batch stays cancelling (OpenAI, request_counts saying
//     what was done) or canceling (Anthropic) for Config.CancelDelay
//     (Server.SetCancelDelay changes it, for batches cancelling too), then
//     ends: OpenAI cancelled, the requests done before the cancel in the
//     output and error files, the rest in neither; Anthropic ended, the
//     rest of type canceled. A batch belongs to the key that created it:
//     another key gets 404. A batch request is validated as real time
//     would validate it and bills Batch API usage.
//
// Test controls ride in the request's text, since the strict API refuses
// extra fields: markers in the last user message's text (an embeddings
// request: its last input; a batch request: its params/body the same way):
//
//	[fake:status=N]        the provider's error for status N (400..599), e.g. 500, 529
//	                       (Anthropic overloaded_error); a batch request errors with it
//	[fake:output_tokens=N] the reply has N output tokens (capped by max_tokens)
//	[fake:refuse]          403 (OpenAI content_policy_violation, Anthropic permission_error)
//	[fake:too_large]       OpenAI's 429 "Request too large ... Limit N, Requested M",
//	                       Anthropic's 413 request_too_large: no wait cures it
//	[fake:quota]           OpenAI's 429 insufficient_quota, Anthropic's credit-balance 400
//	[fake:retry_after=V]   a 429 whose retry-after header is V, as given
//	[fake:latency=D]       the request takes D longer (real time), e.g. 300ms
//	[fake:hold]            a batch request the provider never gets to: the batch stays
//	                       in progress until ExpireBatches or a cancel
//
// An unknown marker is a 400 naming it. Whole-server controls:
// Server.ForceStatus (every inference request gets a status, e.g. 529),
// SetLatency, SetBatchDelay, SetCancelDelay, FailNextBatches (OpenAI:
// failed at validation; Anthropic: every request errored), ExpireBatches,
// Revoke. What arrived:
// Config.Record with Server.Received, or Config.OnRequest, give each
// request's method, path, key index, headers and exact body bytes.
package fakeapi

import (
	"bytes"
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Key is one API key the server accepts.
type Key struct {
	// Secret is the key's value. Required, unique.
	Secret string
	// Rate is the key's limit: at most Rate.N requests admitted in any
	// sliding window of Rate.Period. Zero: unlimited.
	Rate ratelimit.Limit
	// Concurrency is how many requests of the key may be in progress at
	// once. Zero: unlimited.
	Concurrency int
	// Every, when set, admits a request of the key only if its last
	// admitted one was at least this long ago: a leaky bucket without
	// burst, as nginx limit_req enforces "20r/s".
	Every time.Duration
	// Tokens limits the tokens the key's admitted requests take in any
	// sliding window (zero: unlimited). A request takes its body's "cost"
	// field (1 without it) at admission; the reply reports its usage.
	Tokens ratelimit.Limit
	// BareRateLimit and RateHeaders override the Config's for this key.
	BareRateLimit bool
	RateHeaders   string
	// Models are the key's limits per model (models.go), by the name a
	// request's "model" field gives; a request of another model, or
	// without one, is bound by the key's own limits alone.
	Models map[string]ModelLimits
	// Account is the ID of the account (Config.Accounts) whose limits the
	// key draws on besides its own (strict mode). "": none, the key is its
	// own account.
	Account string
}

// Config configures a Server.
type Config struct {
	// Keys are the accepted keys. At least one is required.
	Keys []Key
	// Latency is how long an admitted request takes. Default 0.
	Latency time.Duration
	// RetryAfter is what a 429 says when no exact value applies (the
	// concurrency limit). Default 1s; sent rounded up to whole seconds.
	RetryAfter time.Duration
	// Header names the header that carries the key. Default
	// "Authorization".
	Header string
	// Format is the Header's value with {secret} for the key; it must
	// contain {secret} once. Default "Bearer {secret}".
	Format string
	// BareRateLimit sends 429s without Retry-After, as many gateways do.
	BareRateLimit bool
	// RateHeaders adds the key's figures to every reply, as "openai"
	// (x-ratelimit-{remaining,reset}-{requests,tokens}, retry-after-ms on
	// 429s) or "anthropic" (anthropic-ratelimit-*-{remaining,reset}).
	// Default "" (none).
	RateHeaders string

	// Accounts are the organizations, projects, workspaces or resources
	// whose limits keys share (accounts.go; strict mode only). Default:
	// none.
	Accounts []Account

	// Provider selects the strict mode (strict.go): ProviderOpenAI or
	// ProviderAnthropic answer as that provider's API does and refuse
	// what it refuses; Header, Format and RateHeaders are then the
	// provider's own. Default "": the lenient mode above.
	Provider string
	// Models are the model names the strict mode serves (GET /v1/models);
	// a request for another model gets the provider's 404. Default: any
	// model is served, and the list shows DefaultModels and the keys' and
	// accounts' Models.
	Models []string
	// OutputTokens is how many output tokens a strict reply has when its
	// request's marker sets none, capped by its max_tokens /
	// max_completion_tokens. Default DefaultOutputTokens.
	OutputTokens int
	// BatchDelay is how long a provider batch takes from its creation to
	// its last request (strict mode; Server.SetBatchDelay changes it at
	// run time). Default 0: done at the next look.
	BatchDelay time.Duration
	// CancelDelay is how long a cancelled provider batch stays cancelling
	// (OpenAI) or canceling (Anthropic) before it ends, as a provider may
	// take minutes (OpenAI: up to 10); meanwhile it runs no more requests
	// (strict mode; Server.SetCancelDelay changes it at run time).
	// Default 0: it ends at the next look.
	CancelDelay time.Duration
	// Record keeps every request that arrives in strict mode, for
	// Server.Received.
	Record bool
	// OnRequest, when set, is called with every request that arrives in
	// strict mode, before it is answered.
	OnRequest func(Received)
}

// MaxBody is the largest request body the server reads; a larger one gets
// 413.
const MaxBody = 1 << 20

// maxEcho is the largest request body echoed back.
const maxEcho = 1 << 10

const placeholder = "{secret}"

// Server is the fake API, an http.Handler. Safe for concurrent use.
type Server struct {
	header         string
	prefix, suffix string // Format around {secret}
	retryAfter     time.Duration
	latency        time.Duration
	keys           []*keyState
	unauthorized   atomic.Int64
	badRequests    atomic.Int64

	strict *strictState // nil in the lenient mode
}

// keyState is one key's limits, admission state and figures.
type keyState struct {
	index  int
	label  string
	secret []byte
	conc   int
	every  time.Duration
	bare   bool
	hdrs   string // rate headers: "", openai, anthropic
	models map[string]*modelState

	mu       sync.Mutex
	windows            // the key's own rate and tokens
	inflight int       // admitted requests not yet finished
	last     time.Time // the last admission (for Every)

	active      atomic.Int64 // requests in progress, counted outside mu
	maxActive   atomic.Int64
	requests    atomic.Int64
	ok          atomic.Int64
	rateLimited atomic.Int64
	// revoked: every request of the key gets 401 (Revoke); refused counts
	// the requests refused for the key's or the item's sake.
	revoked    atomic.Bool
	refused    atomic.Int64
	quota      atomic.Int64
	forced     atomic.Int64
	overLimit  atomic.Int64
	tokensUsed atomic.Int64

	usage usageBook    // strict mode: usage the replies reported
	batch batchCounter // strict mode: Files and Batch API calls

	// Strict mode: the key's own buckets (its Rate, Tokens and Models,
	// which its windows then leave unlimited) and its account (nil: none).
	own     *bucketSet
	account *accountState
}

// New returns a Server for cfg; its errors name the field at fault.
func New(cfg Config) (*Server, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("fakeapi: keys: at least one key is required")
	}
	switch {
	case cfg.Latency < 0:
		return nil, fmt.Errorf("fakeapi: latency must not be negative, got %s", cfg.Latency)
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("fakeapi: retry after must not be negative, got %s", cfg.RetryAfter)
	}
	if err := checkRateHeaders(cfg.RateHeaders); err != nil {
		return nil, err
	}
	if err := checkAccounts(cfg); err != nil {
		return nil, err
	}
	s := &Server{
		header:     http.CanonicalHeaderKey(cmp.Or(cfg.Header, "Authorization")),
		retryAfter: cmp.Or(cfg.RetryAfter, time.Second),
		latency:    cfg.Latency,
	}
	format := cmp.Or(cfg.Format, "Bearer "+placeholder)
	if strings.Count(format, placeholder) != 1 {
		return nil, fmt.Errorf("fakeapi: format %q must contain %s once", format, placeholder)
	}
	s.prefix, s.suffix, _ = strings.Cut(format, placeholder)
	if cfg.Provider != "" {
		st, err := newStrict(cfg)
		if err != nil {
			return nil, err
		}
		s.strict = st
	}
	seen := make(map[string]int, len(cfg.Keys))
	for i, k := range cfg.Keys {
		switch {
		case k.Secret == "":
			return nil, fmt.Errorf("fakeapi: keys[%d]: secret is empty", i)
		case k.Concurrency < 0:
			return nil, fmt.Errorf("fakeapi: keys[%d]: concurrency must not be negative, got %d", i, k.Concurrency)
		}
		if j, dup := seen[k.Secret]; dup {
			return nil, fmt.Errorf("fakeapi: keys[%d]: same secret as keys[%d]", i, j)
		}
		seen[k.Secret] = i
		for name, l := range map[string]ratelimit.Limit{"rate": k.Rate, "tokens": k.Tokens} {
			if !l.IsZero() {
				if err := l.Validate(); err != nil {
					return nil, fmt.Errorf("fakeapi: keys[%d]: %s: %w", i, name, err)
				}
			}
		}
		if k.Every < 0 {
			return nil, fmt.Errorf("fakeapi: keys[%d]: every must not be negative, got %s", i, k.Every)
		}
		if err := checkRateHeaders(k.RateHeaders); err != nil {
			return nil, fmt.Errorf("fakeapi: keys[%d]: %w", i, err)
		}
		models, err := newModels(fmt.Sprintf("keys[%d]", i), k.Models)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, &keyState{
			index:   i,
			label:   "key-" + strconv.Itoa(i),
			secret:  []byte(k.Secret),
			windows: windows{rate: k.Rate, tokens: k.Tokens},
			conc:    k.Concurrency,
			every:   k.Every,
			bare:    k.BareRateLimit || cfg.BareRateLimit,
			hdrs:    cmp.Or(k.RateHeaders, cfg.RateHeaders),
			models:  models,
		})
	}
	if s.strict != nil {
		s.strict.init(s, cfg)
	}
	return s, nil
}

// ServeHTTP answers one request; see the package documentation.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.strict != nil {
		s.serveStrict(w, r)
		return
	}
	k := s.authenticate(r.Header.Get(s.header))
	if k == nil {
		s.unauthorized.Add(1)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "unauthorized"})
		return
	}
	k.requests.Add(1)
	if k.revoked.Load() {
		k.refused.Add(1)
		writeRevoked(w)
		return
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		s.badRequests.Add(1)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unreadable_body"})
		return
	}
	if len(body) > MaxBody {
		s.badRequests.Add(1)
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": "body_too_large"})
		return
	}
	var ctl struct {
		ForceStatus       *int            `json:"force_status"`
		InsufficientQuota bool            `json:"insufficient_quota"`
		Cost              *float64        `json:"cost"`
		ActualTokens      *int64          `json:"actual_tokens"`
		Model             json.RawMessage `json:"model"`
		itemControls
	}
	if len(bytes.TrimSpace(body)) > 0 && (!json.Valid(body) || bytes.TrimSpace(body)[0] == '{' && json.Unmarshal(body, &ctl) != nil) {
		s.badRequests.Add(1)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_json"})
		return
	}
	if s.answerItemControls(w, k, ctl.itemControls) {
		return
	}
	switch {
	case ctl.InsufficientQuota:
		k.quota.Add(1)
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"code": "insufficient_quota", "message": "You exceeded your current quota.",
		}})
		return
	case ctl.ForceStatus != nil:
		code := *ctl.ForceStatus
		if code < 100 || code > 599 {
			s.badRequests.Add(1)
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "force_status must be 100..599"})
			return
		}
		k.forced.Add(1)
		writeJSON(w, code, map[string]any{"forced_status": code})
		return
	}

	tokens := int64(1)
	if ctl.Cost != nil && *ctl.Cost >= 1 {
		tokens = int64(*ctl.Cost + 0.999999)
	}
	m := k.model(modelName(ctl.Model))
	if m != nil {
		m.requests.Add(1)
	}
	now := time.Now()
	ok, wait, limit := k.admit(now, s.retryAfter, tokens, m)
	s.setRateHeaders(w, k, m, now)
	if !ok {
		k.rateLimited.Add(1)
		if m != nil {
			m.rateLimited.Add(1)
		}
		if !k.bare {
			w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(wait), 10))
			if k.hdrs == "openai" {
				w.Header().Set("retry-after-ms", strconv.FormatInt(max(wait.Milliseconds(), 1), 10))
			}
		}
		if mlimit, isModel := strings.CutPrefix(limit, "model:"); isModel {
			m.modelLimit.Add(1)
			k.mu.Lock()
			reqs, toks := m.used(now)
			k.mu.Unlock()
			used, requested := int64(reqs), int64(1)
			if mlimit == "tokens" {
				used, requested = toks, tokens
			}
			writeModelLimited(w, m, mlimit, used, requested, wait)
			return
		}
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "rate_limited", "limit": limit})
		return
	}
	k.start()
	defer k.finish()

	if s.latency > 0 {
		t := time.NewTimer(s.latency)
		select {
		case <-r.Context().Done():
			t.Stop()
			return // the client is gone
		case <-t.C:
		}
	}
	used := tokens
	if ctl.ActualTokens != nil && *ctl.ActualTokens >= 0 {
		used = *ctl.ActualTokens
		k.mu.Lock()
		k.reconcile(now, tokens, used)
		if m != nil {
			m.reconcile(now, tokens, used)
		}
		k.mu.Unlock()
	}
	k.tokensUsed.Add(used)
	k.ok.Add(1)
	if m != nil {
		m.tokensUsed.Add(used)
		m.ok.Add(1)
	}
	reply := struct {
		OK       bool            `json:"ok"`
		KeyLabel string          `json:"key_label"`
		Bytes    int             `json:"bytes"`
		Usage    map[string]any  `json:"usage"`
		Echo     json.RawMessage `json:"echo,omitempty"`
	}{OK: true, KeyLabel: k.label, Bytes: len(body), Usage: map[string]any{"total_tokens": used}}
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && len(trimmed) <= maxEcho {
		reply.Echo = trimmed
	}
	writeJSON(w, http.StatusOK, reply)
}

// authenticate returns the key whose secret the header value carries, or
// nil. Every key is compared, in constant time.
func (s *Server) authenticate(v string) *keyState {
	if len(v) < len(s.prefix)+len(s.suffix) || !strings.HasPrefix(v, s.prefix) || !strings.HasSuffix(v, s.suffix) {
		return nil
	}
	candidate := []byte(v[len(s.prefix) : len(v)-len(s.suffix)])
	found := -1
	for i, k := range s.keys {
		if subtle.ConstantTimeCompare(candidate, k.secret) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return s.keys[found]
}

// admit decides whether a request of the key taking `tokens` may start at
// now, counted also against its model's windows when m is not nil. If
// not, it returns how long until it might (the exact time until the rate
// or token window frees or the spacing allows, or concWait for the
// concurrency limit) and which limit refused it ("rate", "every",
// "tokens", "concurrency", or the model's "model:rate", "model:tokens").
func (k *keyState) admit(now time.Time, concWait time.Duration, tokens int64, m *modelState) (bool, time.Duration, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conc > 0 && k.inflight >= k.conc {
		return false, concWait, "concurrency"
	}
	if k.every > 0 && !k.last.IsZero() && now.Sub(k.last) < k.every {
		return false, k.last.Add(k.every).Sub(now), "every"
	}
	if k.rate.N > 0 {
		if wait, ok := k.rateRoom(now); !ok {
			return false, wait, "rate"
		}
	}
	if m != nil {
		if wait, limit, ok := m.room(now, tokens); !ok {
			return false, wait, "model:" + limit
		}
	}
	if k.tokens.N > 0 {
		if wait, ok := k.tokenRoom(now, tokens); !ok {
			return false, wait, "tokens"
		}
	}
	if k.take(now, tokens) {
		k.overLimit.Add(1)
	}
	if k.every > 0 {
		if !k.last.IsZero() && now.Sub(k.last) < k.every {
			k.overLimit.Add(1)
		}
		k.last = now
	}
	if m != nil && m.take(now, tokens) {
		m.overLimit.Add(1)
	}
	k.inflight++
	return true, 0, ""
}

// start counts an admitted request as in progress, apart from admit's own
// book-keeping, and checks the concurrency limit against that count.
func (k *keyState) start() {
	active := k.active.Add(1)
	if k.conc > 0 && active > int64(k.conc) {
		k.overLimit.Add(1)
	}
	for {
		m := k.maxActive.Load()
		if active <= m || k.maxActive.CompareAndSwap(m, active) {
			return
		}
	}
}

// finish ends an admitted request.
func (k *keyState) finish() {
	k.active.Add(-1)
	k.mu.Lock()
	k.inflight--
	k.mu.Unlock()
}

// ceilSeconds rounds d up to whole seconds, at least 1.
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v) // plain values and JSON checked by json.Valid
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// Stats are the server's figures.
type Stats struct {
	// Keys holds one row per configured key, in Config.Keys order.
	Keys []KeyStats `json:"keys"`
	// Accounts holds one row per configured account (strict mode), in
	// Config.Accounts order.
	Accounts []AccountStats `json:"accounts,omitempty"`
	// Unauthorized counts requests with no key or an unknown one.
	Unauthorized int64 `json:"unauthorized"`
	// BadRequests counts requests refused with 400 or 413 (strict mode:
	// also 404s, and the other refusals of a bad request).
	BadRequests int64 `json:"bad_requests"`
}

// KeyStats are one key's figures.
type KeyStats struct {
	Index int    `json:"index"`
	Label string `json:"label"` // "key-<index>"
	// Account is the ID of the account the key draws on ("" none).
	Account string `json:"account,omitempty"`
	// Requests counts authenticated requests with this key.
	Requests int64 `json:"requests"`
	// OK counts 200 answers.
	OK int64 `json:"ok"`
	// RateLimited counts 429s for the key's rate or concurrency.
	RateLimited int64 `json:"rate_limited"`
	// Quota counts insufficient_quota answers; Forced, force_status ones.
	Quota  int64 `json:"quota"`
	Forced int64 `json:"forced"`
	// Refused counts 401s of a revoked key and 403s of refused items.
	Refused int64 `json:"refused"`
	// MaxConcurrent is the most requests of the key seen in progress at
	// once.
	MaxConcurrent int64 `json:"max_concurrent"`
	// OverLimit counts requests admitted beyond the key's rate or
	// concurrency. A self-check: it must stay 0. (The strict mode's
	// buckets admit only what they hold; there it checks the concurrency
	// and Every alone, and AccountStats the accounts.)
	OverLimit int64 `json:"over_limit"`
	// Tokens counts the tokens the key's answered requests used.
	Tokens int64 `json:"tokens"`
	// Models are the figures of the models the key has limits for.
	Models map[string]ModelStats `json:"models,omitempty"`

	// Usage is what the strict mode's replies reported for the key, real
	// time and through the Batch APIs; ModelUsage the same per model (every
	// model, limits or not).
	Usage      UsageSplit            `json:"usage"`
	ModelUsage map[string]UsageSplit `json:"model_usage,omitempty"`
	// Batch counts the key's strict Files and Batch API calls; in strict
	// mode Requests, OK, RateLimited and the other counts above are the
	// inference requests' (chat completions, embeddings, messages).
	Batch BatchStats `json:"batch"`
}

// Stats returns a snapshot of the figures.
func (s *Server) Stats() Stats {
	st := Stats{Unauthorized: s.unauthorized.Load(), BadRequests: s.badRequests.Load()}
	if s.strict != nil {
		st.Accounts = s.strict.accountStats()
	}
	for _, k := range s.keys {
		var account string
		if k.account != nil {
			account = k.account.id
		}
		st.Keys = append(st.Keys, KeyStats{
			Index:         k.index,
			Label:         k.label,
			Account:       account,
			Requests:      k.requests.Load(),
			OK:            k.ok.Load(),
			RateLimited:   k.rateLimited.Load(),
			Quota:         k.quota.Load(),
			Forced:        k.forced.Load(),
			Refused:       k.refused.Load(),
			MaxConcurrent: k.maxActive.Load(),
			OverLimit:     k.overLimit.Load(),
			Tokens:        k.tokensUsed.Load(),
			Models:        k.modelStats(),
			Usage:         k.usage.total(),
			ModelUsage:    k.usage.models(),
			Batch:         k.batch.snapshot(),
		})
	}
	return st
}

// OverLimit is the total of the keys' and their models' OverLimit
// figures; it must be 0.
func (st Stats) OverLimit() int64 {
	var n int64
	for _, k := range st.Keys {
		n += k.OverLimit
		for _, m := range k.Models {
			n += m.OverLimit
		}
	}
	return n
}
