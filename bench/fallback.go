package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 19: fallbacks between kinds (docs/providers.md, "Fallbacks").
// Real worker processes (2 × 16 slots, retry_backoff 200ms) run a kind
// chat (provider openai, 4 keys of max_concurrent 4, group openai) whose
// fallback is chat-azure (openai-compatible, 4 keys of max_concurrent 2,
// group azure; after 5s), each against its own strict OpenAI stand-in
// answering in 25 ms. The fallback's keys bound the work: 8 requests at
// once, 320/s.
//
//   - alone: items of chat-azure itself: the fallback group's items/s;
//   - down: items of chat, chat's API down from the start (nothing
//     listens: every connection is refused): each item fails on chat's
//     keys twice (the first failure retried after the backoff) and runs
//     on chat-azure in place. items/s ÷ alone's (items/s: items over the
//     span from the first lease to the last finish);
//   - outage: items of chat, chat's API healthy, then its listener
//     closed once it answered a quarter of them (connections refused from
//     then on): the time from the close to the first request at the
//     fallback's API; the same with chat's keys disabled instead of its
//     API down (waited: the items wait `after` for a key);
//   - healthy: items of chat, its API healthy: fallbacks (results that
//     name a fallback kind: 0), and what a start costs Redis (EVALSHA µs
//     and Redis commands per item, INFO commandstats) against the same
//     items of a kind without a fallback over the same keys.
var fallbackScenario = &scenario{
	name:  "fallback",
	title: "19. fallbacks: a kind whose API is down runs on its fallback kind",
	figures: []figSpec{
		{id: "alone_rate", name: "the fallback group alone (4 keys × 2, 25 ms), items/s", unit: "items/s"},
		{id: "down_rate", name: "primary down (refused), fallback on healthy keys, items/s", unit: "items/s", ceiling: "alone_rate"},
		{id: "down_ratio", name: "… ÷ the fallback group alone", unit: "fraction", goal: atLeast(0.9)},
		{id: "outage_down_s", name: "outage (listener closed) → the first start on the fallback", unit: "s",
			goal: atMost((fbAfter + time.Second).Seconds())},
		{id: "outage_disabled_s", name: "outage (every key of the kind disabled) → the first start on the fallback", unit: "s",
			goal: atMost((fbAfter + time.Second).Seconds())},
		{id: "healthy_moved", name: "primary healthy: items run on the fallback", unit: "items", goal: never("<=", 0)},
		{id: "healthy_script_us", name: "primary healthy, kind with a fallback: Redis script µs per item", unit: "µs"},
		{id: "plain_script_us", name: "… the same kind without a fallback", unit: "µs"},
		{id: "script_ratio", name: "… with ÷ without a fallback (script µs per item)", unit: "fraction", goal: atMost(1.1)},
		{id: "healthy_calls", name: "Redis commands per item, kind with a fallback / without", unit: "calls"},
		{id: "calls_ratio", name: "… with ÷ without a fallback (commands per item)", unit: "fraction", goal: atMost(1.05)},
	},
	run: runFallback,
}

const (
	fbAfter   = 5 * time.Second
	fbLatency = 25 * time.Millisecond
)

// fbAPIs are the two stand-ins of a run of scenario 19 and the fleet's
// configuration over them.
type fbAPIs struct {
	primary, backup *apiServer
	spec            fleetSpec
}

// fbSetup starts the stand-ins; primaryDown: nothing listens at the
// primary's address.
func fbSetup(primaryDown bool) (*fbAPIs, error) {
	pIDs, bIDs := credIDs("p", 4), credIDs("a", 4)
	keys := func(n int) []fakeapi.Key { return make([]fakeapi.Key, n) }
	s := &fbAPIs{}
	var err error
	if s.backup, err = startAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: keys(len(bIDs)), Latency: fbLatency}, bIDs); err != nil {
		return nil, err
	}
	primaryURL := ""
	if primaryDown {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.close()
			return nil, err
		}
		primaryURL = "http://" + l.Addr().String()
		l.Close() // nothing listens there now: a connection is refused
	} else {
		if s.primary, err = startAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: keys(len(pIDs)), Latency: fbLatency}, pIDs); err != nil {
			s.close()
			return nil, err
		}
		primaryURL = strings.TrimSuffix(s.primary.url, "/v1/bench")
	}
	backupURL := strings.TrimSuffix(s.backup.url, "/v1/bench")
	s.spec = fleetSpec{concurrency: 16, retryBackoff: "[200ms]", kinds: fmt.Sprintf(
		"    chat:\n      http: {provider: openai, url: %q, timeout: 10s}\n      credentials: [openai]\n"+
			"      fallback: {kinds: [chat-azure], after: %s}\n"+
			"    chat-plain:\n      http: {provider: openai, url: %q, timeout: 10s}\n      credentials: [openai]\n"+
			"    chat-azure:\n      http: {provider: openai-compatible, url: %q, timeout: 10s}\n      credentials: [azure]\n",
		primaryURL, fbAfter, primaryURL, backupURL)}
	for _, id := range pIDs {
		s.spec.creds = append(s.spec.creds, credSpec{id: id, max: 4, groups: "[openai]"})
	}
	for _, id := range bIDs {
		s.spec.creds = append(s.spec.creds, credSpec{id: id, max: 2, groups: "[azure]"})
	}
	return s, nil
}

func (s *fbAPIs) close() {
	if s.primary != nil {
		s.primary.close()
	}
	if s.backup != nil {
		s.backup.close()
	}
}

func fbPayload(id string) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"item %s"}],"max_tokens":16}`, id)
}

func runFallback(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	n := pick(r.quick, 2000, 300)
	phase := func(tag, kind, variant string, primaryDown bool, during func(context.Context, *fleet, *fbAPIs) error) ([]kftype.Result, *fbAPIs, CPUUse, error) {
		apis, err := fbSetup(primaryDown)
		if err != nil {
			return nil, nil, CPUUse{}, err
		}
		defer apis.close()
		use, rs, err := e.runKindFleet(ctx, tag, apis.spec, kind, n, 2, variant, func(ctx context.Context, f *fleet) error {
			if during == nil {
				return nil
			}
			return during(ctx, f, apis)
		})
		if err != nil {
			return nil, nil, CPUUse{}, fmt.Errorf("%s: %w", tag, err)
		}
		smp.cpu = append(smp.cpu, use)
		return rs, apis, use, nil
	}
	rate := func(rs []kftype.Result) float64 {
		first, last := span(rs)
		return float64(len(rs)) / last.Sub(first).Seconds()
	}

	rs, _, _, err := phase("fballone", "chat-azure", "keyfleet: 2 workers × 16, the fallback kind's items", true, nil)
	if err != nil {
		return nil, err
	}
	smp.values["alone_rate"] = rate(rs)

	rs, _, _, err = phase("fbdown", "chat", "keyfleet: 2 workers × 16, primary down, fallback", true, nil)
	if err != nil {
		return nil, err
	}
	if err := ranOn(rs, "chat-azure", kftype.FallbackFailing); err != nil {
		return nil, fmt.Errorf("fbdown: %w", err)
	}
	smp.values["down_rate"] = rate(rs)
	smp.values["down_ratio"] = smp.values["down_rate"] / smp.values["alone_rate"]

	for _, o := range []struct{ tag, fig, variant string }{
		{"fbout", "outage_down_s", "keyfleet: 2 workers × 16, the primary's API goes down"},
		{"fbdis", "outage_disabled_s", "keyfleet: 2 workers × 16, the primary's keys disabled"},
	} {
		var at time.Time
		_, apis, _, err := phase(o.tag, "chat", o.variant, false, func(ctx context.Context, f *fleet, apis *fbAPIs) error {
			if err := waitEvents(ctx, apis.primary, n/4); err != nil {
				return err
			}
			at = time.Now()
			if o.fig == "outage_down_s" {
				apis.primary.stop()
				return nil
			}
			p, err := creds.New(e.rdb, f.pool)
			if err != nil {
				return err
			}
			defer p.Close()
			for _, c := range f.spec.creds {
				if strings.HasPrefix(c.id, "p") {
					if err := p.Disable(ctx, c.id, "bench: an outage"); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		ev := apis.backup.events()
		if len(ev) == 0 {
			return nil, fmt.Errorf("%s: no request reached the fallback's API", o.tag)
		}
		smp.values[o.fig] = ev[0].at.Sub(at).Seconds()
	}

	rs, _, with, err := phase("fbhealthy", "chat", "keyfleet: 2 workers × 16, primary healthy, kind with a fallback", false, nil)
	if err != nil {
		return nil, err
	}
	moved := 0
	for _, x := range rs {
		if x.FallbackFrom != "" {
			moved++
		}
	}
	smp.values["healthy_moved"] = float64(moved)
	_, _, without, err := phase("fbplain", "chat-plain", "keyfleet: 2 workers × 16, primary healthy, kind without a fallback", false, nil)
	if err != nil {
		return nil, err
	}
	per := func(u CPUUse) (scriptUS, calls float64) {
		for _, c := range u.RedisCalls {
			calls += c
		}
		return u.RedisScriptUS / float64(n), calls / float64(n)
	}
	wUS, wCalls := per(with)
	pUS, pCalls := per(without)
	smp.values["healthy_script_us"], smp.values["plain_script_us"] = wUS, pUS
	smp.values["script_ratio"] = wUS / pUS
	smp.values["healthy_calls"] = wCalls
	smp.values["calls_ratio"] = wCalls / pCalls
	return smp, nil
}

// ranOn checks that every result succeeded on kind, moved there for why.
func ranOn(rs []kftype.Result, kind, why string) error {
	for _, r := range rs {
		if r.Kind != kind || r.FallbackReason != why {
			return fmt.Errorf("bench: item %s ran on %q (from %q, %q), want %s for %s", r.Item, r.Kind, r.FallbackFrom, r.FallbackReason, kind, why)
		}
	}
	return nil
}

// waitEvents waits until api answered n requests (at most a minute).
func waitEvents(ctx context.Context, api *apiServer, n int) error {
	deadline := time.Now().Add(time.Minute)
	for len(api.events()) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the primary's API answered %d requests in a minute, want %d", len(api.events()), n)
		}
		if err := ctxsleep.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// stop closes the stand-in's listener and its connections at once:
// connections are refused from then on, as an API that went down refuses
// them.
func (a *apiServer) stop() { _ = a.srv.Close() }

// runKindFleet runs n items of kind on a fleet of spec with `workers`
// worker processes, calling during (when set) once they are started; it
// waits for every result, checks they succeeded and returns the phase's
// CPU (its Wall from the first lease to the last finish) and the results.
func (e *env) runKindFleet(ctx context.Context, tag string, spec fleetSpec, kind string, n, workers int, variant string,
	during func(context.Context, *fleet) error) (CPUUse, []kftype.Result, error) {
	f, err := e.newFleet(ctx, tag, spec)
	if err != nil {
		return CPUUse{}, nil, err
	}
	defer f.close(ctx)
	if err := f.enqueueKind(ctx, kind, n, fbPayload); err != nil {
		return CPUUse{}, nil, err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return CPUUse{}, nil, err
	}
	for i := range workers {
		if _, err := f.startWorker(fmt.Sprintf("w%d", i+1)); err != nil {
			return CPUUse{}, nil, err
		}
	}
	if during != nil {
		if err := during(ctx, f); err != nil {
			return CPUUse{}, nil, fmt.Errorf("%w\n%s", err, f.workerLogs())
		}
	}
	if _, err := f.waitResults(ctx, n, 5*time.Minute, 20*time.Millisecond); err != nil {
		return CPUUse{}, nil, err
	}
	use, rs, err := f.finish(ctx, m, variant, n)
	if err != nil {
		return CPUUse{}, nil, err
	}
	if err := spanWall(&use, rs, n); err != nil {
		return CPUUse{}, nil, err
	}
	return use, rs, nil
}
