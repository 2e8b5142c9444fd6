package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// ModelLimits are a key's limits for one model, as OpenAI sets them
// (gpt-4o 30,000 tokens a minute, gpt-4o-mini 200,000 on the same key).
// A request is the model's when its JSON body's top-level "model" field
// names it; it is counted against the model's windows and the key's own
// limits (Key.Rate, Key.Tokens, ...), and refused if either is full.
type ModelLimits struct {
	// Rate: at most Rate.N requests of the model admitted in any sliding
	// window of Rate.Period. Zero: unlimited.
	Rate ratelimit.Limit
	// Tokens: at most Tokens.N tokens (each request's "cost", 1 without
	// it; reconciled to "actual_tokens") in any sliding window. Zero:
	// unlimited.
	Tokens ratelimit.Limit
}

// modelState is one model's windows on one key, guarded by the key's mu
// (except the figures, which are atomic).
type modelState struct {
	name string
	windows

	requests    atomic.Int64
	ok          atomic.Int64
	rateLimited atomic.Int64 // 429s of the model's requests, for any of its key's or its own limits
	modelLimit  atomic.Int64 // of those, refused by the model's own limits
	overLimit   atomic.Int64
	tokensUsed  atomic.Int64
}

// newModels checks and builds a key's per-model limits; where names the
// key ("keys[0]") or account in errors.
func newModels(where string, models map[string]ModelLimits) (map[string]*modelState, error) {
	if len(models) == 0 {
		return nil, nil
	}
	out := make(map[string]*modelState, len(models))
	for name, m := range models {
		if name == "" {
			return nil, fmt.Errorf("fakeapi: %s: models: a model's name is empty", where)
		}
		for what, l := range map[string]ratelimit.Limit{"rate": m.Rate, "tokens": m.Tokens} {
			if !l.IsZero() {
				if err := l.Validate(); err != nil {
					return nil, fmt.Errorf("fakeapi: %s: models[%q]: %s: %w", where, name, what, err)
				}
			}
		}
		out[name] = &modelState{name: name, windows: windows{rate: m.Rate, tokens: m.Tokens}}
	}
	return out, nil
}

// model returns the key's state for the named model, nil when the key has
// no limits for it (the request is bound by the key's own alone).
func (k *keyState) model(name string) *modelState {
	if name == "" {
		return nil
	}
	return k.models[name]
}

// room reports whether a request of the model taking `tokens` fits its
// windows at now; if not, how long until it might and which limit
// refused it ("rate" or "tokens"). It changes nothing but dropping what
// left the windows. The caller holds the key's mu.
func (m *modelState) room(now time.Time, tokens int64) (time.Duration, string, bool) {
	if m.rate.N > 0 {
		if wait, ok := m.rateRoom(now); !ok {
			return wait, "rate", false
		}
	}
	if m.tokens.N > 0 {
		if wait, ok := m.tokenRoom(now, tokens); !ok {
			return wait, "tokens", false
		}
	}
	return 0, "", true
}

// used is what the model's windows hold at now: requests and tokens. The
// caller holds the key's mu.
func (m *modelState) used(now time.Time) (requests int, tokens int64) {
	if m.rate.N > 0 {
		m.dropOld(now)
	}
	if m.tokens.N > 0 {
		m.dropSpent(now)
	}
	return len(m.window), m.tokensInWindow()
}

// headerFigures are the model's limits for the rate headers: for requests
// and tokens, the limit (0: none), what is left and when the window frees
// its newest admission. The caller holds the key's mu.
func (m *modelState) headerFigures(now time.Time) (reqN int, reqLeft int64, reqReset time.Duration, tokN int, tokLeft int64, tokReset time.Duration) {
	reqs, toks := m.used(now)
	if m.rate.N > 0 {
		reqN, reqLeft = m.rate.N, int64(max(m.rate.N-reqs, 0))
		if len(m.window) > 0 {
			reqReset = m.window[len(m.window)-1].Add(m.rate.Period).Sub(now)
		}
	}
	if m.tokens.N > 0 {
		tokN, tokLeft = m.tokens.N, max(int64(m.tokens.N)-toks, 0)
		if len(m.spent) > 0 {
			tokReset = m.spent[len(m.spent)-1].at.Add(m.tokens.Period).Sub(now)
		}
	}
	return
}

// writeModelLimited answers a request refused by its model's limit as
// OpenAI does: "Rate limit reached for <model> in organization ... on
// tokens per min (TPM): Limit N, Used U, Requested R. Please try again in
// 1.2s." The top-level "limit" and "model" say which limit, for tests
// and the benchmark.
func writeModelLimited(w http.ResponseWriter, m *modelState, limit string, used, requested int64, wait time.Duration) {
	n, period, what := m.rate.N, m.rate.Period, "requests"
	if limit == "tokens" {
		n, period, what = m.tokens.N, m.tokens.Period, "tokens"
	}
	msg := fmt.Sprintf("Rate limit reached for %s in organization org-test on %s per %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
		m.name, what, periodName(period, what), n, used, requested, wait.Round(time.Millisecond))
	writeJSON(w, http.StatusTooManyRequests, map[string]any{
		"error": map[string]any{"message": msg, "type": what, "param": nil, "code": "rate_limit_exceeded"},
		"limit": limit, "model": m.name,
	})
}

// periodName says a period as OpenAI's messages do: "min (TPM)", "day
// (RPD)"; other periods as a duration ("10s").
func periodName(p time.Duration, what string) string {
	unit := strings.ToUpper(what[:1])
	switch p {
	case time.Second:
		return "sec (" + unit + "PS)"
	case time.Minute:
		return "min (" + unit + "PM)"
	case 24 * time.Hour:
		return "day (" + unit + "PD)"
	}
	return p.String()
}

// ModelStats are one model's figures on one key (KeyStats.Models) or on
// every key (Stats.Models).
type ModelStats struct {
	// Requests counts the model's requests that reached the limits (past
	// authentication and the item controls).
	Requests int64 `json:"requests"`
	// OK counts their 200 answers.
	OK int64 `json:"ok"`
	// RateLimited counts their 429s for any limit, the key's or the
	// model's; ModelLimited, those for the model's own limits.
	RateLimited  int64 `json:"rate_limited"`
	ModelLimited int64 `json:"model_limited"`
	// OverLimit counts requests admitted beyond the model's rate. A
	// self-check: it must stay 0.
	OverLimit int64 `json:"over_limit"`
	// Tokens counts the tokens their 200 answers used.
	Tokens int64 `json:"tokens"`
}

func (m *modelState) stats() ModelStats {
	return ModelStats{
		Requests:     m.requests.Load(),
		OK:           m.ok.Load(),
		RateLimited:  m.rateLimited.Load(),
		ModelLimited: m.modelLimit.Load(),
		OverLimit:    m.overLimit.Load(),
		Tokens:       m.tokensUsed.Load(),
	}
}

// modelStats are a key's per-model figures; nil when it has no models.
func (k *keyState) modelStats() map[string]ModelStats {
	if len(k.models) == 0 {
		return nil
	}
	out := make(map[string]ModelStats, len(k.models))
	for name, m := range k.models {
		out[name] = m.stats()
	}
	return out
}

// Models sums the per-model figures over every key, by model.
func (st Stats) Models() map[string]ModelStats {
	out := map[string]ModelStats{}
	for _, k := range st.Keys {
		for name, m := range k.Models {
			t := out[name]
			t.Requests += m.Requests
			t.OK += m.OK
			t.RateLimited += m.RateLimited
			t.ModelLimited += m.ModelLimited
			t.OverLimit += m.OverLimit
			t.Tokens += m.Tokens
			out[name] = t
		}
	}
	return out
}

// ModelNames are the models some key has limits for, sorted.
func (st Stats) ModelNames() []string {
	var names []string
	for name := range st.Models() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// modelName is a request's "model" field when it is a JSON string, else
// "".
func modelName(raw json.RawMessage) string {
	var name string
	if len(raw) == 0 || json.Unmarshal(raw, &name) != nil {
		return ""
	}
	return name
}
