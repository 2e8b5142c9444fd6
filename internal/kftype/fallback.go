package kftype

import (
	"cmp"
	"slices"
)

// Why an item ran on a fallback kind instead of its own
// (jobs.kinds.<name>.fallback; Result.FallbackReason).
const (
	// FallbackWaited: it could not start on its own kind's keys within
	// the fallback's after (every key resting, disabled or at its limits).
	FallbackWaited = "waited"
	// FallbackFailing: its runs failed transiently (5xx, a refused
	// connection, a timeout before any reply) twice in a row on its own
	// kind's keys.
	FallbackFailing = "failing"
)

// FallbackCount counts the items of a kind that ran on a fallback kind,
// and why: a row of `status --json`'s and `batch show --json`'s
// "fallbacks".
type FallbackCount struct {
	// Kind is the items' own kind, To the kind they ran on.
	Kind string `json:"kind"`
	To   string `json:"to"`
	// Why is FallbackWaited or FallbackFailing.
	Why   string `json:"why"`
	Items int64  `json:"items"`
}

// SumFallbacks adds counts up by kind, fallback kind and reason, in that
// order; [] when there are none.
func SumFallbacks(lists ...[]FallbackCount) []FallbackCount {
	type key struct{ kind, to, why string }
	sums := map[key]int64{}
	for _, l := range lists {
		for _, c := range l {
			sums[key{c.Kind, c.To, c.Why}] += c.Items
		}
	}
	out := make([]FallbackCount, 0, len(sums))
	for k, n := range sums {
		out = append(out, FallbackCount{Kind: k.kind, To: k.to, Why: k.why, Items: n})
	}
	slices.SortFunc(out, func(a, b FallbackCount) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.To, b.To), cmp.Compare(a.Why, b.Why))
	})
	return out
}
