package fakeapi

import (
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// spend is the tokens one admitted request took at a moment.
type spend struct {
	at     time.Time
	tokens int64
}

// windows are the sliding windows of a rate limit and a token limit, a
// key's own or a model's on a key (zero limits: none), with the
// self-check of the rate. The caller holds the key's mu.
type windows struct {
	rate   ratelimit.Limit
	tokens ratelimit.Limit

	window []time.Time // admission times within the rate window, oldest first
	spent  []spend     // tokens taken within the token window, oldest first
	// history is a ring of the last rate.N admission times, kept apart from
	// window for the self-check.
	history []time.Time
	next    int
}

// rateRoom reports whether one more request fits the rate window at now,
// else how long until it does (once the oldest len-N+1 admissions have
// left).
func (w *windows) rateRoom(now time.Time) (time.Duration, bool) {
	w.dropOld(now)
	if len(w.window) >= w.rate.N {
		return w.window[len(w.window)-w.rate.N].Add(w.rate.Period).Sub(now), false
	}
	return 0, true
}

// tokenRoom reports whether `tokens` more fit in the token window at now,
// else how long until they do.
func (w *windows) tokenRoom(now time.Time, tokens int64) (time.Duration, bool) {
	w.dropSpent(now)
	need := w.tokensInWindow() + tokens - int64(w.tokens.N)
	if need <= 0 {
		return 0, true
	}
	if tokens > int64(w.tokens.N) {
		return w.tokens.Period, false
	}
	var freed int64
	for _, s := range w.spent {
		freed += s.tokens
		if freed >= need {
			return s.at.Add(w.tokens.Period).Sub(now), false
		}
	}
	return w.tokens.Period, false
}

// take counts an admitted request in the windows (after the rooms said it
// fits). over: the self-check found the rate exceeded, the N-th admission
// before this one less than a whole period back.
func (w *windows) take(now time.Time, tokens int64) (over bool) {
	if w.tokens.N > 0 {
		w.spent = append(w.spent, spend{at: now, tokens: tokens})
	}
	if w.rate.N == 0 {
		return false
	}
	w.window = append(w.window, now)
	if len(w.history) < w.rate.N {
		w.history = append(w.history, now)
		return false
	}
	over = now.Sub(w.history[w.next]) < w.rate.Period
	w.history[w.next] = now
	w.next = (w.next + 1) % w.rate.N
	return over
}

func (w *windows) dropOld(now time.Time) {
	drop := 0
	for drop < len(w.window) && now.Sub(w.window[drop]) >= w.rate.Period {
		drop++
	}
	w.window = append(w.window[:0], w.window[drop:]...)
}

func (w *windows) dropSpent(now time.Time) {
	drop := 0
	for drop < len(w.spent) && now.Sub(w.spent[drop].at) >= w.tokens.Period {
		drop++
	}
	w.spent = append(w.spent[:0], w.spent[drop:]...)
}

func (w *windows) tokensInWindow() int64 {
	var n int64
	for _, s := range w.spent {
		n += s.tokens
	}
	return n
}

// reconcile replaces the tokens a request admitted at `at` took with what
// it used.
func (w *windows) reconcile(at time.Time, took, used int64) {
	for i := range w.spent {
		if w.spent[i].at.Equal(at) && w.spent[i].tokens == took {
			w.spent[i].tokens = used
			return
		}
	}
}
