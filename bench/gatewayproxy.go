package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenarios 18a-c: the interactive gateway (docs/gateway.md): real
// worker processes serving the providers' API (an http kind of provider
// openai) on their pool's keys, against internal/fakeapi served by this
// program.
//
//   - gwlatency (18a): what the gateway adds to a request when its keys
//     are idle. One worker, one key; requests one at a time, alternately
//     straight to the stand-in (its strict OpenAI mode, no latency) and
//     through the gateway; the added latency is the difference of their
//     quantiles.
//   - gwbehind (18b): behind a batch that saturates the keys. 4 keys of
//     the stand-in, token buckets of 20/s, told to the pool as
//     {rate: 20/s, burst: 1}; 2 workers × 16 slots run a batch with many
//     items waiting for a key, while an application sends 10 requests a
//     second through the gateway. Its wait for a key is the time from its
//     sending to its arrival at the API; the batch's share is what it got
//     of what the gateway left.
//   - gwthroughput (18c): 1,000 requests a second (open loop) through 2
//     workers' gateways, 8 keys with room to spare, the stand-in's
//     lenient mode at 5 ms a request: errors, the rate reached, CPU per
//     request.
var (
	gwLatencyScenario = &scenario{
		name:  "gwlatency",
		title: "18a. gateway: added latency, keys idle (direct vs through the gateway)",
		figures: []figSpec{
			{id: "added_p50", name: "added latency p50 (gateway p50 − direct p50)", unit: "ms", goal: atMost(1)},
			{id: "added_p99", name: "added latency p99 (gateway p99 − direct p99)", unit: "ms", goal: atMost(3)},
			{id: "direct_p50", name: "direct to the API, p50", unit: "ms"},
			{id: "direct_p99", name: "direct to the API, p99", unit: "ms"},
			{id: "gateway_p50", name: "through the gateway, p50", unit: "ms"},
			{id: "gateway_p99", name: "through the gateway, p99", unit: "ms"},
			{id: "added_mean", name: "the worker's own figure: mean of keyfleet_gateway_added_latency_seconds", unit: "ms",
				note: "the gateway's time outside the API's round trip, by its own clock"},
		},
		run: runGWLatency,
	}
	gwBehindScenario = &scenario{
		name:  "gwbehind",
		title: "18b. gateway behind a batch that saturates the keys",
		figures: []figSpec{
			{id: "wait_p99", name: "the gateway's wait for a key (sending → arrival at the API), p99", unit: "ms", goal: atMost(gwBehindSpacingMS + 5),
				note: "target: a key's spacing (1/20 s: the longest until a key's next start is allowed) + 5 ms"},
			{id: "wait_p50", name: "the gateway's wait for a key, p50", unit: "ms"},
			{id: "batch_share", name: "the batch's starts ÷ what the gateway left of the keys' limits", unit: "fraction", goal: atLeast(0.95)},
			{id: "api_429", name: "429s from the API (limits told)", unit: "count", goal: never("<=", 0)},
			{id: "gateway_per_s", name: "gateway requests answered", unit: "requests/s"},
			{id: "batch_per_s", name: "batch items answered meanwhile", unit: "items/s"},
			{id: "allowed", name: "allowed: 4 keys × 20/s", unit: "requests/s"},
		},
		run: runGWBehind,
	}
	gwThroughputScenario = &scenario{
		name:  "gwthroughput",
		title: "18c. gateway: 1,000 requests/s through 2 workers",
		figures: []figSpec{
			{id: "errors", name: "requests not answered 200", unit: "count", goal: never("<=", 0)},
			{id: "rate", name: "requests answered", unit: "requests/s", goal: atLeast(990), ceiling: "offered"},
			{id: "offered", name: "offered (open loop)", unit: "requests/s"},
			{id: "p50", name: "latency through the gateway (the API takes 5 ms), p50", unit: "ms"},
			{id: "p99", name: "latency through the gateway, p99", unit: "ms"},
			{id: "worker_cpu_us", name: "the workers' CPU per request", unit: "µs"},
		},
		run: runGWThroughput,
	}
)

// gwToken is the token the bench's application holds.
const gwToken = "kfbench-gateway-token"

// gwBehindSpacingMS is a key's spacing in gwbehind: 1/20 s.
const gwBehindSpacingMS = 50

// gatewayExtra is a gateway section for every worker of a fleet, each on
// a free loopback port of its own (addrs, by worker ID), and the token's
// variable for the workers' environment.
func gatewayExtra(serving ...string) (extra func(string) string, addrs map[string]string, env []string, err error) {
	addrs = map[string]string{}
	for _, id := range serving {
		port, err := launch.FreePort()
		if err != nil {
			return nil, nil, nil, err
		}
		addrs[id] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	var mu sync.Mutex
	extra = func(worker string) string {
		mu.Lock()
		defer mu.Unlock()
		addr, ok := addrs[worker]
		if !ok {
			return ""
		}
		return fmt.Sprintf("gateway: {listen: %q, tokens: [{token_env: KFBENCH_GW_TOKEN}], max_wait: 30s}\n", addr)
	}
	return extra, addrs, []string{"KFBENCH_GW_TOKEN=" + gwToken}, nil
}

// gwClient sends requests to the gateways and the API, reusing its
// connections.
var gwClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024}}

// gwPost sends body to url with the bearer token and returns the status
// and when the reply's body had come whole.
func gwPost(ctx context.Context, url, token string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := gwClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// waitGateway waits until a gateway answers (a 404 for /), at most 30 s.
func waitGateway(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		if resp, err := gwClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("bench: the gateway at %s did not answer within 30s", addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// workersCPU is the CPU seconds the fleet's workers used so far.
func (f *fleet) workersCPU() (float64, error) {
	total := 0.0
	for _, w := range f.workers {
		c, err := w.cpu()
		if err != nil {
			return 0, err
		}
		total += c
	}
	return total, nil
}

// phaseCPU stops the workers and returns the CPU seconds they used since
// before (workersCPU at the phase's start).
func (f *fleet) phaseCPU(ctx context.Context, before float64) (float64, error) {
	total, err := f.stopWorkers(ctx)
	return total - before, err
}

// apiBase is a stand-in's base URL (startAPI's url names an endpoint).
func apiBase(a *apiServer) string { return strings.TrimSuffix(a.url, "/v1/bench") }

// msSorted turns durations into sorted milliseconds.
func msSorted(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(out)
	return out
}

func runGWLatency(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	ids := credIDs("gl", 1)
	api, err := startAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{}}}, ids)
	if err != nil {
		return nil, err
	}
	defer api.close()
	extra, addrs, env, err := gatewayExtra("w1")
	if err != nil {
		return nil, err
	}
	spec := fleetSpec{concurrency: 1, creds: []credSpec{{id: ids[0], max: 64}}, httpURL: apiBase(api), provider: "openai",
		extra: extra, workerEnv: env}
	f, err := e.newFleet(ctx, "gwl", spec)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	w, _, err := f.startReady(ctx, "w1")
	if err != nil {
		return nil, err
	}
	if err := waitGateway(ctx, addrs["w1"]); err != nil {
		return nil, err
	}
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}`)
	direct, through := apiBase(api)+"/v1/chat/completions", "http://"+addrs["w1"]+"/v1/chat/completions"
	n := pick(r.quick, 3000, 300)
	var dd, gd []time.Duration
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	before, err := f.workersCPU()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for i := range n + 50 {
		for _, v := range []struct {
			url, token string
			into       *[]time.Duration
		}{{direct, secretOf(ids[0]), &dd}, {through, gwToken, &gd}} {
			t := time.Now()
			code, err := gwPost(ctx, v.url, v.token, body)
			if err != nil || code != http.StatusOK {
				return nil, fmt.Errorf("bench: %s: %d %v", v.url, code, err)
			}
			if i >= 50 { // the first 50 warm the connections up
				*v.into = append(*v.into, time.Since(t))
			}
		}
	}
	wall := time.Since(start)
	sums, err := w.metrics(ctx, "keyfleet_gateway_added_latency_seconds_sum", "keyfleet_gateway_added_latency_seconds_count")
	if err != nil {
		return nil, err
	}
	workersCPU, err := f.phaseCPU(ctx, before)
	if err != nil {
		return nil, err
	}
	use, err := m.done(ctx, "gateway requests, keys idle", n, wall, map[string]float64{"workers": workersCPU})
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	ds, gs := msSorted(dd), msSorted(gd)
	smp.values["direct_p50"], smp.values["direct_p99"] = quantile(ds, 0.5), quantile(ds, 0.99)
	smp.values["gateway_p50"], smp.values["gateway_p99"] = quantile(gs, 0.5), quantile(gs, 0.99)
	smp.values["added_p50"] = smp.values["gateway_p50"] - smp.values["direct_p50"]
	smp.values["added_p99"] = smp.values["gateway_p99"] - smp.values["direct_p99"]
	if sums[1] > 0 {
		smp.values["added_mean"] = 1000 * sums[0] / sums[1]
	}
	return smp, nil
}

func runGWBehind(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	const keys, perKey = 4, 20
	smp.values["allowed"] = keys * perKey
	ids := credIDs("gb", keys)
	fk := make([]fakeapi.Key, keys)
	for i := range fk {
		fk[i] = fakeapi.Key{Rate: ratelimit.Limit{N: perKey, Period: time.Second}}
	}
	api, err := startAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: fk, Latency: 10 * time.Millisecond}, ids)
	if err != nil {
		return nil, err
	}
	defer api.close()
	extra, addrs, env, err := gatewayExtra("w1")
	if err != nil {
		return nil, err
	}
	spec := fleetSpec{concurrency: 16, httpURL: apiBase(api), provider: "openai", extra: extra, workerEnv: env}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 4, limits: fmt.Sprintf("[{rate: %d/s, burst: 1}]", perKey)})
	}
	f, err := e.newFleet(ctx, "gwb", spec)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	phase := pick(r.quick, 15*time.Second, 3*time.Second)
	// Enough items to keep the keys saturated past the phase.
	n := int((phase + 4*time.Second).Seconds() * keys * perKey)
	if err := f.enqueueKind(ctx, "http", n, func(id string) []byte {
		// A provider kind's request: the item's ID rides in "user" (what
		// the stand-in's log reads), not in a field the API refuses.
		return fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"batch item"}],"max_tokens":4,"user":%q}`, id)
	}); err != nil {
		return nil, err
	}
	if err := f.startWorkers("w1", "w2"); err != nil {
		return nil, err
	}
	if err := f.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := waitGateway(ctx, addrs["w1"]); err != nil {
		return nil, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	// Saturated: the keys run at their limits for a second first.
	if err := ctxsleep.Sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	before, err := f.workersCPU()
	if err != nil {
		return nil, err
	}
	url := "http://" + addrs["w1"] + "/v1/chat/completions"
	const every = 100 * time.Millisecond // 10 requests a second
	sent := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failures []string
	start := time.Now()
	for i := 0; time.Since(start) < phase; i++ {
		id := fmt.Sprintf("gw-%05d", i)
		wg.Go(func() {
			mu.Lock()
			sent[id] = time.Now()
			mu.Unlock()
			code, err := gwPost(ctx, url, gwToken, fmt.Appendf(nil,
				`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"interactive"}],"max_tokens":4,"user":%q}`, id))
			if err != nil || code != http.StatusOK {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %d %v", id, code, err))
				mu.Unlock()
			}
		})
		if err := ctxsleep.Sleep(ctx, time.Until(start.Add(time.Duration(i+1)*every))); err != nil {
			return nil, err
		}
	}
	end := time.Now()
	wg.Wait()
	if len(failures) > 0 {
		return nil, fmt.Errorf("bench: %d gateway requests failed, e.g. %s", len(failures), failures[0])
	}
	workersCPU, err := f.phaseCPU(ctx, before)
	if err != nil {
		return nil, err
	}
	var waits []time.Duration
	var batchOK, gwOK, limited int
	for _, ev := range api.events() {
		if ev.status == http.StatusTooManyRequests {
			limited++
		}
		if ev.status != http.StatusOK || ev.at.Before(start) || ev.at.After(end) {
			continue
		}
		if t, ok := sent[ev.item]; ok {
			gwOK++
			waits = append(waits, ev.at.Sub(t))
		} else {
			batchOK++
		}
	}
	use, err := m.done(ctx, "batch items and gateway requests, keys saturated", batchOK+gwOK, end.Sub(start), map[string]float64{"workers": workersCPU})
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	ws := msSorted(waits)
	secs := end.Sub(start).Seconds()
	smp.values["wait_p50"], smp.values["wait_p99"] = quantile(ws, 0.5), quantile(ws, 0.99)
	smp.values["api_429"] = float64(limited)
	smp.values["gateway_per_s"], smp.values["batch_per_s"] = float64(gwOK)/secs, float64(batchOK)/secs
	if rest := smp.values["allowed"]*secs - float64(gwOK); rest > 0 {
		smp.values["batch_share"] = float64(batchOK) / rest
	}
	return smp, nil
}

func runGWThroughput(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	const rate = 1000
	smp.values["offered"] = rate
	ids := credIDs("gt", 8)
	fk := make([]fakeapi.Key, len(ids))
	api, err := startAPI(fakeapi.Config{Keys: fk, Latency: 5 * time.Millisecond}, ids)
	if err != nil {
		return nil, err
	}
	defer api.close()
	extra, addrs, env, err := gatewayExtra("w1", "w2")
	if err != nil {
		return nil, err
	}
	spec := fleetSpec{concurrency: 1, httpURL: apiBase(api), provider: "openai", extra: extra, workerEnv: env}
	for _, id := range ids {
		spec.creds = append(spec.creds, credSpec{id: id, max: 64})
	}
	f, err := e.newFleet(ctx, "gwt", spec)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	if err := f.startWorkers("w1", "w2"); err != nil {
		return nil, err
	}
	if err := f.waitReady(ctx); err != nil {
		return nil, err
	}
	urls := []string{"http://" + addrs["w1"] + "/v1/chat/completions", "http://" + addrs["w2"] + "/v1/chat/completions"}
	for _, u := range urls {
		if err := waitGateway(ctx, strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/v1/chat/completions")); err != nil {
			return nil, err
		}
	}
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}`)
	// Warm the connections up.
	for i := range 100 {
		if code, err := gwPost(ctx, urls[i%2], gwToken, body); err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("bench: warming up: %d %v", code, err)
		}
	}
	phase := pick(r.quick, 10*time.Second, 2*time.Second)
	n := int(phase.Seconds() * rate)
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	before, err := f.workersCPU()
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			if err := ctxsleep.Sleep(ctx, d); err != nil {
				return nil, err
			}
		}
		wg.Go(func() {
			t := time.Now()
			codes[i], _ = gwPost(ctx, urls[i%2], gwToken, body)
			lat[i] = time.Since(t)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	workersCPU, err := f.phaseCPU(ctx, before)
	if err != nil {
		return nil, err
	}
	use, err := m.done(ctx, "gateway requests at 1,000/s, 2 workers", n, wall, map[string]float64{"workers": workersCPU})
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	errs := 0
	for _, c := range codes {
		if c != http.StatusOK {
			errs++
		}
	}
	ls := msSorted(lat)
	smp.values["errors"] = float64(errs)
	smp.values["rate"] = float64(n-errs) / wall.Seconds()
	smp.values["p50"], smp.values["p99"] = quantile(ls, 0.5), quantile(ls, 0.99)
	smp.values["worker_cpu_us"] = 1e6 * workersCPU / float64(n)
	return smp, nil
}
