package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Scenario 12: a gateway. Real worker processes (2 × 4 slots, http kind)
// against internal/fakeapi acting as a gateway that admits one request
// per 50 ms per key (Every, like nginx limit_req at 20r/s without burst)
// and answers anything faster with a bare 429 (no Retry-After). 4 keys of
// max_concurrent 1; each request takes 10 ms; the items are enqueued
// before the workers start.
//
//   - (a) the pool knows the limit: limits: [{rate: 20/s, burst: 1}];
//   - (b) it does not (no limits, pool.cooldown at its default, 60 s): the
//     fleet learns a pace from the bare 429s. 1,200 items (15 s at the
//     allowed rate): the learning, in the first second or so, is counted in
//     the 429s, and is a part of the run as small as in a real batch.
//
// items/s is the API's steady rate of 200 answers: those after each key's
// first, over the time from the first 200 to the last (the gateway admits
// a key's first request at once); allowed is 4 keys × 20/s. 429s per 1,000
// requests come from fakeapi's Stats. Time to converge (b): from the first
// request to the end of the last sliding second (windows [t−1s, t), t in
// 10 ms steps) in which 5% or more of the answers were 429s; after it,
// every second of the run stays under 5%.
var gatewayScenario = &scenario{
	name:  "gateway",
	title: "12. gateway (one request per 50 ms per key, bare 429s)",
	figures: []figSpec{
		{id: "a_429", name: "(a) pool limits [{rate: 20/s, burst: 1}]: 429s per 1,000 requests", unit: "per 1,000", goal: never("<=", 0)},
		{id: "a_ratio", name: "(a) items/s ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
		{id: "a_items_per_s", name: "(a) items/s", unit: "items/s", ceiling: "allowed"},
		{id: "a_dispatch_p50", name: "(a) lease grant → request at the API, p50", unit: "ms",
			note: "the results' leased_at (Redis's clock) to the API's arrival (the same machine's clock), successful requests"},
		{id: "a_dispatch_p99", name: "(a) lease grant → request at the API, p99", unit: "ms",
			note: "two grants 50 ms apart reach the gateway less than 50 ms apart when the first one's dispatch took longer: a bare 429"},
		{id: "b_ratio", name: "(b) no limits configured: items/s ÷ allowed", unit: "fraction", goal: atLeast(0.75)},
		{id: "b_429", name: "(b) 429s per 1,000 requests", unit: "per 1,000", goal: atMost(50)},
		{id: "b_converge", name: "(b) time to converge: until the 429 share of every later second stays under 5%", unit: "s"},
		{id: "b_items_per_s", name: "(b) items/s", unit: "items/s", ceiling: "allowed"},
		{id: "allowed", name: "allowed: 4 keys × 20/s", unit: "items/s"},
	},
	run: runGateway,
}

const (
	gatewayKeys  = 4
	gatewayEvery = 50 * time.Millisecond
)

func runGateway(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	smp.values["allowed"] = gatewayKeys * float64(time.Second/gatewayEvery)
	for _, v := range []struct {
		key    string
		limits string
		n      int
		what   string
	}{
		{"a", "[{rate: 20/s, burst: 1}]", pick(r.quick, 400, 100), "keyfleet: 2 workers, pool limit rate=20/s,burst=1"},
		{"b", "", pick(r.quick, 1200, 150), "keyfleet: 2 workers, no limits (a pace learnt from bare 429s)"},
	} {
		st, ev, rs, use, err := gatewayRun(ctx, e, v.limits, v.n, v.what)
		if err != nil {
			return nil, fmt.Errorf("(%s): %w", v.key, err)
		}
		smp.cpu = append(smp.cpu, use)
		rate := okRate(ev)
		smp.values[v.key+"_429"] = per1000(st)
		smp.values[v.key+"_items_per_s"] = rate
		smp.values[v.key+"_ratio"] = rate / smp.values["allowed"]
		if v.key == "b" {
			smp.values["b_converge"] = convergence(ev, 0.05).Seconds()
		} else {
			d := dispatchLatency(ev, rs)
			smp.values["a_dispatch_p50"], smp.values["a_dispatch_p99"] = quantile(d, 0.5), quantile(d, 0.99)
		}
		if o := st.OverLimit(); o != 0 {
			return nil, fmt.Errorf("bench: (%s): the stand-in API admitted %d requests over its limits (its self-check)", v.key, o)
		}
	}
	return smp, nil
}

// gatewayRun runs n items through 2 workers against a fresh gateway.
func gatewayRun(ctx context.Context, e *env, limits string, n int, variant string) (fakeapi.Stats, []apiEvent, []kftype.Result, CPUUse, error) {
	ids := credIDs("g", gatewayKeys)
	keys := make([]fakeapi.Key, len(ids))
	for i := range keys {
		keys[i] = fakeapi.Key{Every: gatewayEvery, BareRateLimit: true}
	}
	api, err := startAPI(fakeapi.Config{Keys: keys, Latency: 10 * time.Millisecond}, ids)
	if err != nil {
		return fakeapi.Stats{}, nil, nil, CPUUse{}, err
	}
	defer api.close()
	spec := fleetSpec{concurrency: 4, httpURL: api.url}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 1, limits: limits})
	}
	use, rs, err := e.runHTTPFleet(ctx, "gw", spec, n, 2, variant, func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q}`, id)
	}, nil)
	if err != nil {
		return fakeapi.Stats{}, nil, nil, CPUUse{}, err
	}
	return api.api.Stats(), api.events(), rs, use, nil
}

// runHTTPFleet enqueues n http items and runs `workers` worker processes
// until every item has a result and all succeeded, or, when stop is set,
// until stop returns (then the items done so far must have succeeded). It
// returns the phase's CPU (its wall: the workers' start to the end) and
// the results.
func (e *env) runHTTPFleet(ctx context.Context, tag string, spec fleetSpec, n, workers int, variant string, payload func(id string) []byte, stop func(context.Context) error) (CPUUse, []kftype.Result, error) {
	f, err := e.newFleet(ctx, tag, spec)
	if err != nil {
		return CPUUse{}, nil, err
	}
	defer f.close(ctx)
	kind := "http"
	if spec.httpURL == "" && spec.exec != "" {
		kind = "exec"
	}
	if err := f.enqueueKind(ctx, kind, n, payload); err != nil {
		return CPUUse{}, nil, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return CPUUse{}, nil, err
	}
	start := time.Now()
	for i := range workers {
		if _, err := f.startWorker(fmt.Sprintf("w%d", i+1)); err != nil {
			return CPUUse{}, nil, err
		}
	}
	var end time.Time
	if stop != nil {
		if err := stop(ctx); err != nil {
			return CPUUse{}, nil, fmt.Errorf("%w\n%s", err, f.workerLogs())
		}
		end = time.Now()
	} else if end, err = f.waitResults(ctx, n, 5*time.Minute, 20*time.Millisecond); err != nil {
		return CPUUse{}, nil, err
	}
	use, rs, err := f.finish(ctx, m, variant, n)
	if err != nil {
		return CPUUse{}, nil, err
	}
	if stop == nil {
		err = checkSucceeded(rs, n)
	} else {
		err = checkSucceeded(rs, len(rs))
	}
	if err != nil {
		return CPUUse{}, nil, err
	}
	use.Wall = end.Sub(start).Seconds()
	if stop != nil {
		use.Items = len(rs)
	}
	return use, rs, nil
}
