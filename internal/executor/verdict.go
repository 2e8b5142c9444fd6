package executor

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// runEnd is how one run of an item ended, as the worker saw it.
type runEnd struct {
	// err is the job's error (nil: the item is done).
	err error
	// interrupted is why the run's context ended early (shutdown, a lost
	// lease or message), nil when it did not.
	interrupted error
	// out is what the job reported.
	out jobs.Output
	// item names the item ("<batch>/<id>") for the pool's refusal streaks.
	item string
}

// Labels of a verdict, as metrics and logs name them.
const (
	labelSucceeded   = "succeeded"
	labelInterrupted = "interrupted"
	labelRateLimited = "rate_limited"
	labelRejected    = "rejected"
	labelPermanent   = "permanent"
	labelTransient   = "transient"
)

// verdict is what a run comes to: how its lease ends and what becomes of
// its item. judge decides it from the run alone; a transient failure's
// fate also needs the item's failure count (afterFailure).
type verdict struct {
	label string
	// lease is how the lease ends: cost, rest, pace, disable.
	lease creds.Outcome
	// again: run the item again at once on another credential (rate
	// limited, rejected key); no attempt is used up.
	again bool
	// fail: the run is a failed attempt (transient).
	fail bool
	// dead: dead-letter the item with this reason (permanent).
	dead string
	// restSource says where a rest after a rate limit came from, for
	// metrics: retry_after, bare_429.
	restSource string
	// reason is the rate limit's or the rejection's text, scrubbed.
	reason string
	// cut names a rest the reply asked for that pool.max_rest cut
	// ("Retry-After header asked for 27777h46m39s"), for a warning.
	cut []string
}

// judging is what judge needs of the configuration.
type judging struct {
	// cooldown is pool.cooldown: the longest rest after bare 429s.
	cooldown time.Duration
	// maxRest is pool.max_rest: no rest a reply asks for is longer.
	maxRest time.Duration
	// scrub removes secrets from texts.
	scrub func(string) string
}

// minRest is the rest after a rate limit whose Retry-After is 0 ("retry
// now"): a pause, not a hot loop.
const minRest = 100 * time.Millisecond

// judge decides what a run comes to.
func judge(r runEnd, p judging) verdict {
	var cut []string
	lease := creds.Outcome{Cost: r.out.Cost, Sent: r.out.Sent, Signals: p.signals(r.out.Signals, &cut)}
	outcome := jobs.Classify(r.err)
	switch {
	case r.err == nil:
		if r.out.Rest > 0 {
			lease.Rest, lease.RestReason, lease.RestCause = p.capRest(r.out.Rest, r.out.RestFrom, &cut), "the job asked for a rest after a success", r.out.RestFrom
		}
		return verdict{label: labelSucceeded, lease: lease, cut: cut}

	case r.interrupted != nil && outcome == jobs.OutcomeTransient:
		// Shutdown, lost lease or lost message: not the item's fault.
		return verdict{label: labelInterrupted, lease: lease}

	case outcome == jobs.OutcomeRateLimited:
		var rl *jobs.RateLimitedError
		errors.As(r.err, &rl)
		lease.RateLimited = true
		lease.Signals = append(lease.Signals, p.signals(rl.Signals, &cut)...)
		v := verdict{label: labelRateLimited, again: true}
		if rl.Source == "" {
			// A bare 429: the key's pace adapts fleet-wide; the rest is
			// short and grows with 429s in a row, at most the cooldown.
			lease.MaxRest = p.cooldown
			v.restSource = "bare_429"
			v.reason = p.scrub("429 without Retry-After: " + rl.Detail)
			lease.RestReason = v.reason
		} else {
			lease.Rest = max(p.capRest(rl.RetryAfter, rl.Source, &cut), minRest)
			v.restSource = "retry_after"
			v.reason = p.scrub(fmt.Sprintf("resting %s (from %s) after: %s", lease.Rest, rl.Source, rl.Detail))
			lease.RestReason, lease.RestCause = v.reason, rl.Source
		}
		v.lease, v.cut = lease, cut
		return v

	case outcome == jobs.OutcomeRejected:
		// One refusal is evidence, not a verdict: the pool disables the
		// key once it refused several different items in a row, and the
		// worker dead-letters an item several keys refused (settle).
		var rej *jobs.RejectedError
		errors.As(r.err, &rej)
		reason := p.scrub(rej.Reason)
		if reason == "" {
			reason = "rejected by the API"
		}
		lease.Refused = &creds.Refusal{Item: r.item, Reason: reason}
		return verdict{label: labelRejected, lease: lease, again: true, reason: reason, cut: cut}

	case outcome == jobs.OutcomePermanent:
		return verdict{label: labelPermanent, lease: lease, fail: true, dead: kftype.ReasonPermanent, cut: cut}

	default:
		return verdict{label: labelTransient, lease: lease, fail: true, cut: cut}
	}
}

// capRest cuts a rest a reply asked for to pool.max_rest, noting the cut.
func (p judging) capRest(d time.Duration, from string, cut *[]string) time.Duration {
	if p.maxRest <= 0 || d <= p.maxRest {
		return d
	}
	*cut = append(*cut, fmt.Sprintf("%s asked for a rest of %s", cmp.Or(from, "the reply"), d))
	return p.maxRest
}

// signals turns the API's figures into the pool's, each reset cut to
// pool.max_rest.
func (p judging) signals(ss []jobs.Signal, cut *[]string) []creds.Signal {
	if len(ss) == 0 {
		return nil
	}
	out := make([]creds.Signal, len(ss))
	for i, s := range ss {
		out[i] = creds.Signal{Name: s.Name, Tokens: s.Tokens, Remaining: s.Remaining, Reset: p.capRest(s.Reset, s.Name+" header", cut),
			Limit: s.Limit}
	}
	return out
}

// failurePolicy bounds a failing item's runs.
type failurePolicy struct {
	maxAttempts int
	maxDeliver  int // JetStream's max_deliver; <= 0 unlimited
	delay       func(failures int) time.Duration
}

// afterFailure says what becomes of an item whose run failed
// transiently, with `failures` failed runs counted so far on its
// `delivered`-th delivery: a dead-letter reason, or the wait before it
// runs again.
func afterFailure(failures int, delivered uint64, p failurePolicy) (dead string, retryIn time.Duration) {
	switch {
	case failures >= p.maxAttempts:
		return kftype.ReasonOutOfAttempts, 0
	case p.maxDeliver > 0 && delivered >= uint64(p.maxDeliver):
		return kftype.ReasonMaxDeliveries, 0
	}
	return "", p.delay(failures)
}

// refusalKeysToDeadLetter is how many different keys must refuse an item
// to make it the culprit: it is dead-lettered, naming the refusals.
const refusalKeysToDeadLetter = 3

// refusedBy lists the keys that refused an item (st.Refused: one
// "<credential>\t<reason>" a line), each once, in order, and the
// refusals as "<credential>: <reason>" texts.
func refusedBy(st RunCount) (keys, texts []string) {
	for line := range strings.SplitSeq(st.Refused, "\n") {
		id, reason, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		if !slices.Contains(keys, id) {
			keys = append(keys, id)
		}
		texts = append(texts, id+": "+reason)
	}
	return keys, texts
}

// afterRefusal says whether an item a key just refused is dead-lettered,
// and with what error: once refusalKeysToDeadLetter different keys
// refused it, or every key there is (usable, the pool's size) when that
// is fewer. One key refusing it again does not count again: the worker
// does not run an item on a key that refused it (refusedAlready).
func afterRefusal(st RunCount, usable int) (deadText string) {
	keys, texts := refusedBy(st)
	if len(keys) < min(refusalKeysToDeadLetter, max(usable, 1)) {
		return ""
	}
	return fmt.Sprintf("refused by %d keys: %s", len(keys), strings.Join(texts, "; "))
}

// refusedAlready reports whether credential id refused the item before:
// the worker hands such a lease back unused and the item waits for
// another key.
func refusedAlready(st RunCount, id string) bool {
	keys, _ := refusedBy(st)
	return slices.Contains(keys, id)
}

// afterRateLimit says whether an item just rate limited is dead-lettered
// (worker.max_rate_limited in a row), and with what error.
func afterRateLimit(st RunCount, maxInARow int, reason string) (deadText string) {
	if maxInARow <= 0 || st.Limited < maxInARow {
		return ""
	}
	return fmt.Sprintf("rate limited %d times in a row (worker.max_rate_limited); the last: %s", st.Limited, reason)
}
