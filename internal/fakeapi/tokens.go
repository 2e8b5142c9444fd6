package fakeapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// setRateHeaders adds the key's figures to a reply in the configured
// provider's format.
func checkRateHeaders(v string) error {
	switch v {
	case "", "openai", "anthropic":
		return nil
	}
	return fmt.Errorf("fakeapi: rate headers %q: want openai, anthropic or none", v)
}

func (s *Server) setRateHeaders(w http.ResponseWriter, k *keyState, m *modelState, now time.Time) {
	if k.hdrs == "" {
		return
	}
	k.mu.Lock()
	var reqLeft, tokLeft int64 = -1, -1
	var reqReset, tokReset time.Duration
	reqN, tokN := k.rate.N, k.tokens.N
	if k.rate.N > 0 {
		k.dropOld(now)
		reqLeft = int64(k.rate.N - len(k.window))
		if len(k.window) > 0 {
			reqReset = k.window[len(k.window)-1].Add(k.rate.Period).Sub(now)
		}
	}
	if k.tokens.N > 0 {
		k.tokenRoom(now, 0)
		tokLeft = max(int64(k.tokens.N)-k.tokensInWindow(), 0)
		if len(k.spent) > 0 {
			tokReset = k.spent[len(k.spent)-1].at.Add(k.tokens.Period).Sub(now)
		}
	}
	if m != nil {
		// The model's limits, where it has them, as OpenAI reports a
		// request's model.
		mReqN, mReqLeft, mReqReset, mTokN, mTokLeft, mTokReset := m.headerFigures(now)
		if mReqN > 0 {
			reqN, reqLeft, reqReset = mReqN, mReqLeft, mReqReset
		}
		if mTokN > 0 {
			tokN, tokLeft, tokReset = mTokN, mTokLeft, mTokReset
		}
	}
	k.mu.Unlock()
	h := w.Header()
	switch k.hdrs {
	case "openai":
		if reqLeft >= 0 {
			h.Set("x-ratelimit-limit-requests", strconv.Itoa(reqN))
			h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(reqLeft, 10))
			h.Set("x-ratelimit-reset-requests", reqReset.Round(time.Millisecond).String())
		}
		if tokLeft >= 0 {
			h.Set("x-ratelimit-limit-tokens", strconv.Itoa(tokN))
			h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(tokLeft, 10))
			h.Set("x-ratelimit-reset-tokens", tokReset.Round(time.Millisecond).String())
		}
	case "anthropic":
		if reqLeft >= 0 {
			h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(reqN))
			h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(reqLeft, 10))
			h.Set("anthropic-ratelimit-requests-reset", now.Add(reqReset).UTC().Format(time.RFC3339Nano))
		}
		if tokLeft >= 0 {
			h.Set("anthropic-ratelimit-tokens-limit", strconv.Itoa(tokN))
			h.Set("anthropic-ratelimit-tokens-remaining", strconv.FormatInt(tokLeft, 10))
			h.Set("anthropic-ratelimit-tokens-reset", now.Add(tokReset).UTC().Format(time.RFC3339Nano))
		}
	}
}
