package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenario 13h: pacing at the refill rate the headers imply. Real worker
// processes (2 × 4 slots, a provider kind) against the strict stand-in of
// each provider: 2 keys (max_concurrent 4) with a bucket of 30 requests
// refilled at 3/s each, limits not told; each request takes 20 ms.
// Anthropic's resets are RFC 3339 times in whole seconds (rounded up),
// OpenAI's durations in milliseconds. The run lasts k windows of 10 s
// (3; 1 with -quick) from the first request.
//
// 200s ÷ allowed: the 200 answers in [first request, first request + k ×
// 10 s) ÷ what the buckets allow there (30 + 3/s × k × 10 s each). 429s:
// the stand-in's refusals ÷ every request.
var refillScenario = &scenario{
	name:  "refill",
	title: "13h. pacing at the refill rate the headers imply (2 keys, a bucket of 30 refilled at 3/s each, limits not told)",
	figures: []figSpec{
		{id: "an_ratio", name: "Anthropic headers (whole-second resets): 200s ÷ allowed", unit: "fraction", goal: atLeast(0.90)},
		{id: "an_per1000", name: "… 429s per 1,000 requests", unit: "per 1,000", goal: atMost(10)},
		{id: "oa_ratio", name: "OpenAI headers (ms resets): 200s ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
		{id: "oa_per1000", name: "… 429s per 1,000 requests", unit: "per 1,000", goal: atMost(10)},
	},
	run: func(ctx context.Context, e *env, r runInfo) (*sample, error) {
		smp := newSample()
		for _, v := range []struct{ pfx, prov string }{{"an_", fakeapi.ProviderAnthropic}, {"oa_", fakeapi.ProviderOpenAI}} {
			ratio, per1000, use, err := runRefill(ctx, e, r, v.prov)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.prov, err)
			}
			smp.values[v.pfx+"ratio"], smp.values[v.pfx+"per1000"] = ratio, per1000
			smp.cpu = append(smp.cpu, use)
		}
		return smp, nil
	},
}

const (
	refillKeys   = 2
	refillBurst  = 30
	refillPeriod = 10 * time.Second
)

func runRefill(ctx context.Context, e *env, r runInfo, prov string) (float64, float64, CPUUse, error) {
	k := pick(r.quick, 3, 1)
	window := time.Duration(k) * refillPeriod
	allowed := float64(refillKeys) * (refillBurst + refillBurst*window.Seconds()/refillPeriod.Seconds())
	ids := credIDs("r"+prov[:2], refillKeys)
	keys := make([]fakeapi.Key, len(ids))
	for i := range keys {
		keys[i] = fakeapi.Key{Rate: ratelimit.Limit{N: refillBurst, Period: refillPeriod}}
	}
	api, err := startAPI(fakeapi.Config{Provider: prov, Keys: keys, Latency: 20 * time.Millisecond}, ids)
	if err != nil {
		return 0, 0, CPUUse{}, err
	}
	defer api.close()
	if prov == fakeapi.ProviderAnthropic {
		// Anthropic's key header is x-api-key: the recorder names the key
		// from it.
		for _, id := range ids {
			api.byID[secretOf(id)] = id
		}
	}
	kind := provider.OpenAI
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"item %s"}],"max_tokens":16}`
	if prov == fakeapi.ProviderAnthropic {
		kind = provider.Anthropic
		body = `{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"item %s"}],"max_tokens":16}`
	}
	spec := fleetSpec{concurrency: 4, httpURL: strings.TrimSuffix(api.url, "/v1/bench"), provider: kind}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 4})
	}
	var t0 time.Time
	stop := api.windowFromFirst(window, &t0)
	n := int(allowed * 1.5)
	use, _, err := e.runHTTPFleet(ctx, "refill"+prov[:2], spec, n, 2, "keyfleet: 2 workers, "+prov+" headers, limits not told",
		func(id string) []byte { return fmt.Appendf(nil, body, id) }, stop)
	if err != nil {
		return 0, 0, CPUUse{}, err
	}
	var oks float64
	for _, ev := range api.events() {
		if ev.status == http.StatusOK && ev.at.Before(t0.Add(window)) {
			oks++
		}
	}
	return oks / allowed, per1000(api.api.Stats()), use, nil
}
