package fakeapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// draw is one bucket a request draws on and what it takes from it.
type draw struct {
	b      *bucket
	cost   int64
	tokens bool       // a token bucket; else a request bucket
	set    *bucketSet // the bucket's holder (its organization, its account)
	model  bool       // the holder's bucket for the request's model
}

// draws are the buckets a request of the key for model, taking tokens,
// draws on: the key's own, then its account's; of each, the requests (its
// own, then the model's), then the tokens (the model's, then its own).
func (k *keyState) draws(model string, tokens int64) []draw {
	var ds []draw
	add := func(b *bucket, cost int64, tok bool, s *bucketSet, isModel bool) {
		if b != nil {
			ds = append(ds, draw{b: b, cost: cost, tokens: tok, set: s, model: isModel})
		}
	}
	holders := []*bucketSet{k.own}
	if k.account != nil {
		holders = append(holders, k.account.limits)
	}
	for _, s := range holders {
		m := s.models[model]
		add(s.rate, 1, false, s, false)
		if m != nil {
			add(m.rate, 1, false, m, true)
			add(m.tokens, tokens, true, m, true)
		}
		add(s.tokens, tokens, true, s, false)
	}
	return ds
}

// bucketView is one bucket's figures as a reply reports them.
type bucketView struct {
	limit, remaining int64
	reset            time.Duration // until the bucket is full again
}

// admission is a strict request's admission: whether its key's and
// account's buckets (and the key's concurrency and spacing) let it start,
// and what its reply's rate-limit headers report.
type admission struct {
	now  time.Time
	ok   bool
	wait time.Duration // until the request would fit every bucket
	// refused is the first bucket that refused it (nil: none, or local);
	// its figures at the refusal, and tooLarge when the request takes more
	// than the bucket holds at all.
	refused  *draw
	used     int64
	tooLarge bool
	// local is "concurrency" or "every" when the key's own pacing refused.
	local string
	// req and tok are the headers' figures: for requests and for tokens,
	// the most restrictive of the buckets it draws on (nil: none).
	req, tok *bucketView
}

// admit decides a strict request of the key (m: its model's figures on
// the key, nil when the key has no limits for it) taking tokens. Every
// bucket it draws on must hold its share; if one does not, nothing is
// taken, and wait is the time until every one would (as both providers
// compute retry-after: the time until the request fits). The buckets are
// read and taken under one lock, with the time read under it.
func (st *strictState) admit(k *keyState, m *modelState, model string, tokens int64) admission {
	st.limMu.Lock()
	defer st.limMu.Unlock()
	a := admission{now: time.Now()}
	ds := k.draws(model, tokens)
	for _, d := range ds {
		d.b.refill(a.now)
	}
	for i := range ds {
		d := &ds[i]
		if d.b.fits(d.cost) {
			continue
		}
		w, can := d.b.wait(d.cost)
		if a.refused == nil {
			a.refused, a.used, a.tooLarge = d, d.b.used(), !can
		}
		a.wait = max(a.wait, w)
	}
	if a.refused == nil {
		ok, wait, limit := k.admit(a.now, st.srv.retryAfter, tokens, m)
		if ok {
			a.ok = true
			for _, d := range ds {
				d.b.take(d.cost)
			}
		} else {
			a.local, a.wait = limit, wait
		}
	}
	a.req, a.tok = headerBuckets(ds)
	return a
}

// headerBuckets are the buckets a reply's rate-limit headers report, for
// requests and for tokens: of those the request draws on, the one with
// the least room (of equal room, the longer to be full again), as
// Anthropic's headers do: "The anthropic-ratelimit-tokens-* headers
// display the values for the most restrictive limit currently in effect.
// For instance, if you have exceeded the Workspace per-minute token
// limit, the headers will contain the Workspace per-minute token rate
// limit values" (docs.anthropic.com/en/api/rate-limits). So a key of an
// account reports the room it shares with the account's other keys
// whenever that is the least.
func headerBuckets(ds []draw) (req, tok *bucketView) {
	for _, d := range ds {
		v := &bucketView{limit: d.b.n, remaining: d.b.remaining(), reset: d.b.untilFull()}
		cur := &req
		if d.tokens {
			cur = &tok
		}
		if *cur == nil || v.remaining < (*cur).remaining || v.remaining == (*cur).remaining && v.reset > (*cur).reset {
			*cur = v
		}
	}
	return req, tok
}

// setStrictRateHeaders adds the admission's figures to a reply in the
// provider's format:
//
//   - OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens}; limit
//     "The maximum number of requests that are permitted before exhausting
//     the rate limit", remaining the bucket's whole units, reset "The time
//     until the rate limit (based on requests) resets to its initial
//     state" (platform.openai.com/docs/guides/rate-limits, "Rate limits in
//     headers"): the time until the bucket is full, as a Go duration
//     ("6m0s", "1s", "12ms" in the docs' and replies' samples) rounded up
//     to the millisecond, so that it says "0s" only of a full bucket.
//   - Anthropic: anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}
//     and the tokens' figures as input-tokens and output-tokens too (one
//     token bucket here bounds both); reset "The time when the request
//     rate limit will be fully replenished, provided in RFC 3339 format"
//     (docs.anthropic.com/en/api/rate-limits), in whole seconds as the API
//     sends them (a 429 dated 19:59:59 GMT with
//     "anthropic-ratelimit-requests-reset: 2024-03-26T20:00:00Z", quoted in
//     github.com/anthropics/anthropic-sdk-typescript/issues/357), rounded
//     up (as measured for keyfleet's issue 41), so never before the bucket
//     is full.
//
// The docs say Anthropic's token figures are "rounded to the nearest
// thousand"; replies quoted since 2025 show exact ones (19 input tokens
// remaining of 40,000), and exact ones are sent here.
func setStrictRateHeaders(w http.ResponseWriter, provider string, a admission) {
	h := w.Header()
	if provider == ProviderOpenAI {
		for name, v := range map[string]*bucketView{"requests": a.req, "tokens": a.tok} {
			if v != nil {
				h.Set("x-ratelimit-limit-"+name, strconv.FormatInt(v.limit, 10))
				h.Set("x-ratelimit-remaining-"+name, strconv.FormatInt(v.remaining, 10))
				h.Set("x-ratelimit-reset-"+name, openaiReset(v.reset))
			}
		}
		return
	}
	for name, v := range map[string]*bucketView{"requests": a.req, "tokens": a.tok} {
		if v == nil {
			continue
		}
		names := []string{name}
		if name == "tokens" {
			names = append(names, "input-tokens", "output-tokens")
		}
		for _, n := range names {
			h.Set("anthropic-ratelimit-"+n+"-limit", strconv.FormatInt(v.limit, 10))
			h.Set("anthropic-ratelimit-"+n+"-remaining", strconv.FormatInt(v.remaining, 10))
			h.Set("anthropic-ratelimit-"+n+"-reset", anthropicReset(a.now, v.reset))
		}
	}
}

// openaiReset writes a reset as OpenAI does: a Go duration, rounded up to
// the millisecond ("0s" of a full bucket).
func openaiReset(d time.Duration) string {
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// anthropicReset writes a reset as Anthropic does: the moment now+d, in
// UTC, in RFC 3339 whole seconds rounded up.
func anthropicReset(now time.Time, d time.Duration) string {
	t := now.Add(d).UTC()
	if r := t.Truncate(time.Second); !r.Equal(t) {
		t = r.Add(time.Second)
	}
	return t.Format(time.RFC3339)
}

// limitError is the provider's 429 for a request its admission refused,
// with retry-after (and OpenAI's retry-after-ms) saying the admission's
// wait. OpenAI: "Rate limit reached for gpt-4o in organization org-xxx on
// tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please
// try again in 2s. Visit https://platform.openai.com/account/rate-limits
// to learn more.", type "tokens" or "requests", code rate_limit_exceeded
// (the API's 429 as its SDKs' users quote it); a request larger than the
// bucket holds gets the API's "Request too large for ... Limit N,
// Requested M. The input or output tokens must be reduced in order to run
// successfully.", which no wait cures. Anthropic: "This request would
// exceed the rate limit for your organization (<id>) of 20,000 input
// tokens per minute. ..." (quoted in github.com/OpenHands/OpenHands/issues/9259).
// The organization is the refusing bucket's account, or org-test for a
// key's own limits.
func (st *strictState) limitError(k *keyState, q *query, a admission) *apiError {
	what, n, period, used, requested, org := "requests", int64(0), time.Duration(0), int64(0), int64(1), "org-test"
	switch {
	case a.local == "concurrency":
		n, used = int64(k.conc), int64(k.conc)
	case a.local == "every":
		n, period, used = 1, k.every, 1
	case a.refused != nil:
		d := a.refused
		n, period, used, requested, org = d.b.n, time.Duration(d.b.period), a.used, d.cost, d.set.org
		if d.tokens {
			what = "tokens"
		}
	}
	e := &apiError{status: http.StatusTooManyRequests, header: st.retryHeaders(a.wait)}
	if st.openai() {
		e.typ, e.code = what, strp("rate_limit_exceeded")
		switch {
		case a.tooLarge:
			e.header = nil
			e.message = fmt.Sprintf("Request too large for %s in organization %s on %s per %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
				q.model, org, what, periodName(period, what), n, requested)
		case period == 0:
			e.message = fmt.Sprintf("Rate limit reached for %s in organization %s on concurrent requests: Limit %d, Used %d, Requested 1. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
				q.model, org, n, used, a.wait.Round(time.Millisecond))
		default:
			e.message = fmt.Sprintf("Rate limit reached for %s in organization %s on %s per %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
				q.model, org, what, periodName(period, what), n, used, requested, a.wait.Round(time.Millisecond))
		}
		return e
	}
	e.typ = "rate_limit_error"
	per := "minute"
	switch period {
	case 0:
		per, what = "moment", "concurrent requests"
	case time.Second:
		per = "second"
	case time.Minute:
	case time.Hour:
		per = "hour"
	case 24 * time.Hour:
		per = "day"
	default:
		per = period.String()
	}
	e.message = fmt.Sprintf("This request would exceed the rate limit for your organization (%s) of %s %s per %s. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
		org, thousands(n), what, per)
	return e
}
