package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenario 13c: two scopes on the same keys, one held at its limit, as an
// API limits a key per model. Real worker processes (2 × 8 slots, http
// kind, pool.scope: {field: model}) against internal/fakeapi: 4 keys, each
// allowing model a 5 requests/s and model b 20/s (sliding windows of 1 s;
// no limit of the key's own), each request 20 ms. The pool is told the
// same: every credential has limits [{rate: 5/s, scope: a}, {rate: 20/s,
// scope: b}], so a 429 is a start the API did not allow.
//
// One batch: first enough a items to keep scope a at its limit for the
// whole run (enqueued first: ahead of every b item), then the b items;
// the second variant interleaves them evenly in one batch. The slots are
// not b's bottleneck (80/s × 20 ms is under 2 slots busy). The first two
// send no rate headers; the third is the first with OpenAI's
// x-ratelimit-* headers on every reply, describing the request's model's
// limits as OpenAI's do (an a reply says a's requests left and reset).
//
// The figures count starts by their lease grant (the results' leased_at,
// Redis's clock, the pool's own): from the later of the two scopes' first
// grants, d whole seconds (5; 2 with -quick). b ÷ allowed: b's grants
// there ÷ d × 4 × 20; a ÷ allowed: a's ÷ d × 4 × 5 (a sliding window of
// 1 s allows at most that in d whole seconds: above 1 is the pool
// over-granting). 429s come from fakeapi's figures per model over the
// whole run.
var scopesScenario = &scenario{
	name:  "scopes",
	title: "13c. Two scopes on the same keys, one held at its limit",
	figures: []figSpec{
		{id: "b_ratio", name: "b starts/s ÷ b's allowed (4 × 20/s) while a is held at its limit (a enqueued first)", unit: "fraction", goal: atLeast(0.9)},
		{id: "a_ratio", name: "a starts/s ÷ a's allowed (4 × 5/s), same window", unit: "fraction", goal: never("<=", 1.0)},
		{id: "b_per1000", name: "429s per 1,000 requests of b (the API has the pool's limits)", unit: "per 1,000"},
		{id: "a_per1000", name: "429s per 1,000 requests of a", unit: "per 1,000"},
		{id: "mixed_b_ratio", name: "b starts/s ÷ b's allowed, a and b interleaved in one batch", unit: "fraction", goal: atLeast(0.9)},
		{id: "mixed_a_ratio", name: "a starts/s ÷ a's allowed, interleaved", unit: "fraction", goal: never("<=", 1.0)},
		{id: "mixed_b_per1000", name: "429s per 1,000 requests of b, interleaved", unit: "per 1,000"},
		{id: "mixed_a_per1000", name: "429s per 1,000 requests of a, interleaved", unit: "per 1,000"},
		{id: "hdr_b_ratio", name: "b starts/s ÷ b's allowed, a enqueued first, every reply with OpenAI's x-ratelimit-* headers of its model", unit: "fraction", goal: atLeast(0.9)},
		{id: "hdr_a_ratio", name: "a starts/s ÷ a's allowed, with the headers", unit: "fraction", goal: never("<=", 1.0)},
		{id: "hdr_b_per1000", name: "429s per 1,000 requests of b, with the headers", unit: "per 1,000"},
		{id: "hdr_a_per1000", name: "429s per 1,000 requests of a, with the headers", unit: "per 1,000"},
	},
	run: runScopes,
}

const (
	scopesKeys    = 4
	scopesARate   = 5  // per second per key
	scopesBRate   = 20 // per second per key
	scopesLatency = 20 * time.Millisecond
)

func runScopes(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	d := pick(r.quick, 5, 2)
	for _, v := range []struct {
		prefix  string
		mixed   bool
		headers string
	}{{"", false, ""}, {"mixed_", true, ""}, {"hdr_", false, "openai"}} {
		m, use, err := runScopesVariant(ctx, e, d, v.mixed, v.headers)
		if err != nil {
			return nil, fmt.Errorf("%sscopes: %w", v.prefix, err)
		}
		for k, x := range m {
			smp.values[v.prefix+k] = x
		}
		smp.cpu = append(smp.cpu, use)
	}
	return smp, nil
}

// runScopesVariant runs one fleet for d measured seconds and returns its
// figures (without the variant's prefix). headers is fakeapi's
// RateHeaders ("" none).
func runScopesVariant(ctx context.Context, e *env, d int, mixed bool, headers string) (map[string]float64, CPUUse, error) {
	ids := credIDs("s", scopesKeys)
	keys := make([]fakeapi.Key, len(ids))
	for i := range keys {
		keys[i] = fakeapi.Key{Models: map[string]fakeapi.ModelLimits{
			"a": {Rate: ratelimit.Limit{N: scopesARate, Period: time.Second}},
			"b": {Rate: ratelimit.Limit{N: scopesBRate, Period: time.Second}},
		}}
	}
	api, err := startAPI(fakeapi.Config{Keys: keys, Latency: scopesLatency, RateHeaders: headers}, ids)
	if err != nil {
		return nil, CPUUse{}, err
	}
	defer api.close()
	spec := fleetSpec{concurrency: 8, httpURL: api.url, scope: "model"}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 8,
			limits: fmt.Sprintf("[{rate: %d/s, scope: a}, {rate: %d/s, scope: b}]", scopesARate, scopesBRate)})
	}
	// Enough of each for the whole run: workers' start, d seconds and the
	// stop's margin, at the allowed rates, with room to spare.
	na, nb := scopesKeys*scopesARate*(d+6), scopesKeys*scopesBRate*(d+4)
	n := na + nb
	scopeOf := scopeItems(na, nb, mixed)
	// The run ends d seconds and a margin after both scopes reached the API.
	stop := func(ctx context.Context) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			first := map[string]time.Time{}
			for _, ev := range api.events() {
				if s := scopeOf[ev.item]; s != "" && first[s].IsZero() {
					first[s] = ev.at
				}
			}
			if !first["a"].IsZero() && !first["b"].IsZero() {
				t0 := first["a"]
				if first["b"].After(t0) {
					t0 = first["b"]
				}
				return ctxsleep.Sleep(ctx, time.Until(t0.Add(time.Duration(d)*time.Second+time.Second)))
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bench: items of both scopes did not reach the API within 30s (a: %v, b: %v)", !first["a"].IsZero(), !first["b"].IsZero())
			}
			if err := ctxsleep.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
	variant := "keyfleet: 2 workers, scopes a (held at its limit, enqueued first) and b"
	if mixed {
		variant = "keyfleet: 2 workers, scopes a (held at its limit) and b interleaved"
	}
	if headers != "" {
		variant += ", " + headers + " rate headers of the request's model"
	}
	payload := func(id string) []byte { return fmt.Appendf(nil, `{"id":%q,"model":%q}`, id, scopeOf[id]) }
	use, rs, err := e.runHTTPFleet(ctx, "scopes", spec, n, 2, variant, payload, stop)
	if err != nil {
		return nil, CPUUse{}, err
	}
	st := api.api.Stats()
	if o := st.OverLimit(); o != 0 {
		return nil, CPUUse{}, fmt.Errorf("bench: the stand-in API admitted %d requests over its limits (its self-check)", o)
	}
	out, err := scopeRatios(rs, scopeOf, d)
	if err != nil {
		return nil, CPUUse{}, err
	}
	models := st.Models()
	for _, s := range []string{"a", "b"} {
		if m := models[s]; m.Requests > 0 {
			out[s+"_per1000"] = 1000 * float64(m.RateLimited) / float64(m.Requests)
		}
	}
	if err := scopesAnswered(api.events(), scopeOf); err != nil {
		return nil, CPUUse{}, err
	}
	return out, use, nil
}

// scopeItems gives the scope of each item ID enqueueKind makes: na a items
// then nb b items, or (mixed) the a items spread evenly among the b items.
func scopeItems(na, nb int, mixed bool) map[string]string {
	n := na + nb
	scopeOf := make(map[string]string, n)
	for i := range n {
		s := "b"
		if !mixed && i < na || mixed && (i+1)*na/n > i*na/n {
			s = "a"
		}
		scopeOf[fmt.Sprintf("item-%06d", i)] = s
	}
	return scopeOf
}

// scopeRatios counts each scope's starts (the results' lease grants) in d
// whole seconds from the later of the scopes' first grants, as fractions
// of what the scope's limits allow there.
func scopeRatios(rs []kftype.Result, scopeOf map[string]string, d int) (map[string]float64, error) {
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for _, r := range rs {
		s := scopeOf[r.Item]
		if first[s].IsZero() || r.LeasedAt.Before(first[s]) {
			first[s] = r.LeasedAt
		}
		if r.LeasedAt.After(last[s]) {
			last[s] = r.LeasedAt
		}
	}
	if first["a"].IsZero() || first["b"].IsZero() {
		return nil, fmt.Errorf("bench: results of a: %v, of b: %v; want both", !first["a"].IsZero(), !first["b"].IsZero())
	}
	t0 := first["a"]
	if first["b"].After(t0) {
		t0 = first["b"]
	}
	t1 := t0.Add(time.Duration(d) * time.Second)
	for _, s := range []string{"a", "b"} {
		// Each scope must have run past the window, or it ran out of items
		// (or the run stopped) inside it.
		if !last[s].After(t1) {
			return nil, fmt.Errorf("bench: scope %s's last start %s is not after the window's end %s: it ran out of items",
				s, last[s].Format(time.StampMilli), t1.Format(time.StampMilli))
		}
	}
	count := map[string]int{}
	for _, r := range rs {
		if !r.LeasedAt.Before(t0) && r.LeasedAt.Before(t1) {
			count[scopeOf[r.Item]]++
		}
	}
	allowed := map[string]float64{"a": scopesKeys * scopesARate, "b": scopesKeys * scopesBRate}
	return map[string]float64{
		"a_ratio": float64(count["a"]) / (allowed["a"] * float64(d)),
		"b_ratio": float64(count["b"]) / (allowed["b"] * float64(d)),
	}, nil
}

// scopesAnswered checks that every request the API answered was of a known
// item and answered 200 or 429.
func scopesAnswered(ev []apiEvent, scopeOf map[string]string) error {
	for _, e := range ev {
		if scopeOf[e.item] == "" {
			return fmt.Errorf("bench: the API answered a request of an unknown item %q", e.item)
		}
		if e.status != http.StatusOK && e.status != http.StatusTooManyRequests {
			return fmt.Errorf("bench: the API answered item %s with %d", e.item, e.status)
		}
	}
	return nil
}
