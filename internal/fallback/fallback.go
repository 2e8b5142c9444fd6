// Package fallback says where the work of a kind goes when the kind's own
// keys cannot serve it: the kinds its jobs.kinds.<name>.fallback lists,
// in order (docs/providers.md, "Fallbacks"), and it counts the moves, by
// kind, fallback kind and reason, for the worker's metrics and its
// heartbeat (what `producer status` sums over the fleet).
//
// The executor decides when a batch item moves (internal/executor,
// fallback.go); a gateway request moves by the same rules: a caller that
// could not start on kind K within After(K) (kftype.FallbackWaited), or
// whose request failed transiently twice in a row on K's keys
// (kftype.FallbackFailing), asks Next(K, why, kinds tried) for the kind
// to try, and counts a start there with Moved.
package fallback

import (
	"slices"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
)

// Router knows every kind's fallback and counts the moves. Its methods
// are safe for concurrent use; a nil *Router has no fallbacks.
type Router struct {
	rules   map[string]config.Fallback
	metrics *metrics.Metrics // nil: none

	mu     sync.Mutex
	counts map[move]int64
}

// move is one count's key: from kind to kind, and why.
type move struct{ from, to, why string }

// NewRouter reads the fallbacks of cfg's kinds (validated); m (optional)
// gets the moves counted in keyfleet_fallbacks_total.
func NewRouter(cfg *config.Config, m *metrics.Metrics) *Router {
	r := &Router{rules: map[string]config.Fallback{}, metrics: m, counts: map[move]int64{}}
	for _, name := range cfg.Jobs.KindNames() {
		if f := cfg.Jobs.FallbackOf(name); f != nil {
			r.rules[name] = *f
		}
	}
	return r
}

// Kinds are kind's fallback kinds, in order (nil: none).
func (r *Router) Kinds(kind string) []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.rules[kind].Kinds)
}

// After is how long work of kind may wait for one of its own keys before
// it moves; ok is false when kind has no fallback.
func (r *Router) After(kind string) (after time.Duration, ok bool) {
	if r == nil {
		return 0, false
	}
	f, ok := r.rules[kind]
	return f.After, ok
}

// Next returns the kind that work of kind moves to for why
// (kftype.FallbackWaited or FallbackFailing): the first of kind's
// fallback kinds not among tried (the kinds the caller already tried for
// it). ok is false when there is none left, or kind has no fallback.
// Both reasons follow the same list; the caller names why so that what
// it does next is said (and counted, Moved) with its reason; a why that
// is neither gets none.
func (r *Router) Next(kind, why string, tried ...string) (to string, ok bool) {
	if why != kftype.FallbackWaited && why != kftype.FallbackFailing {
		return "", false
	}
	for _, k := range r.Kinds(kind) {
		if !slices.Contains(tried, k) {
			return k, true
		}
	}
	return "", false
}

// Moved counts work of kind from that started on kind to, and why.
func (r *Router) Moved(from, to, why string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.counts[move{from, to, why}]++
	r.mu.Unlock()
	if r.metrics != nil {
		r.metrics.Fallbacks.WithLabelValues(from, to, why).Inc()
	}
}

// Counts are the moves counted so far, by kind, fallback kind and reason
// ([] when none).
func (r *Router) Counts() []kftype.FallbackCount {
	if r == nil {
		return []kftype.FallbackCount{}
	}
	r.mu.Lock()
	l := make([]kftype.FallbackCount, 0, len(r.counts))
	for m, n := range r.counts {
		l = append(l, kftype.FallbackCount{Kind: m.from, To: m.to, Why: m.why, Items: n})
	}
	r.mu.Unlock()
	return kftype.SumFallbacks(l)
}
