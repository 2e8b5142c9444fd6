package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenario 18: accounts (docs/limits.md, "Accounts"). Real worker
// processes (2 × 12 slots, a provider kind of openai) against the strict
// OpenAI stand-in, which limits 2 organizations of 3 keys each (max
// concurrent 4) to a bucket of 30 requests refilled at 3/s each, as the
// providers describe their limits, and reports that shared room on every
// key's replies; each request takes 20 ms. More items are enqueued than
// the organizations take in the run (k windows of 10 s, 3; 1 with -quick,
// from the first request, then the workers stop).
//
//   - (a) the pool is told the organizations' limits at the accounts, as
//     the bucket they are: {rate: 30/10s, burst: 30};
//   - (b) it is told the accounts but no limits: the headers pace them;
//   - (b0) the per-key model of before: no accounts, no limits (each key
//     learns from its own replies only);
//   - (c) one key of an account alone (the account told as in a).
//
// requests ÷ allowed: the 200 answers that came in [first request, first
// request + k × 10 s) ÷ what the buckets allow there (30 + 3/s × k × 10 s
// each). 429s: the organizations' refusals ÷ every request (fakeapi's
// Stats).
//
// Then in process (pkg/creds), what a start costs Redis (as scenario 9:
// µs of script time per acquire+release, the median of 10 batches): 64
// keys in 8 projects (one limit each) inside one organization (one
// limit), against the same limits without accounts, split by hand onto
// each key (two limits each: its share of its project's and of the
// organization's, what a user had to write before); and one account of
// 10 keys against one of 1,000, its limit binding (saturated: each
// acquire queues and is cancelled) and not (room).
var accountsScenario = &scenario{
	name:  "accounts",
	title: "18. accounts: keys that share an account share its limits",
	figures: []figSpec{
		{id: "a_per1000", name: "(a) limits told at the account: 429s per 1,000 requests", unit: "per 1,000", goal: atMost(5)},
		{id: "a_ratio", name: "(a) requests ÷ allowed", unit: "fraction", goal: atLeast(0.95)},
		{id: "b_per1000", name: "(b) accounts, limits not told (headers): 429s per 1,000 requests", unit: "per 1,000", goal: atMost(20)},
		{id: "b_ratio", name: "(b) requests ÷ allowed", unit: "fraction", goal: atLeast(0.90)},
		{id: "b0_per1000", name: "(b0) no accounts (each key its own, as before): 429s per 1,000 requests", unit: "per 1,000"},
		{id: "b0_ratio", name: "(b0) requests ÷ allowed", unit: "fraction"},
		{id: "c_ratio", name: "(c) one key of an account alone: requests ÷ the account's allowed", unit: "fraction", goal: atLeast(0.90)},
		{id: "flat_us", name: "Redis µs per acquire+release: 64 keys, no accounts, the limits split onto each key (2 each)", unit: "µs"},
		{id: "chain_us", name: "… the same keys in 8 projects (one limit each) in one organization (one limit)", unit: "µs",
			ceiling: "flat_us", note: "the ratio column is chain ÷ flat"},
		{id: "chain_ratio", name: "… two-level chain ÷ no accounts", unit: "fraction", goal: atMost(1.15)},
		{id: "k10_us", name: "Redis µs per acquire+release, one account of 10 keys (room)", unit: "µs"},
		{id: "k1000_us", name: "… of 1,000 keys", unit: "µs", ceiling: "k10_us"},
		{id: "k10_sat_us", name: "Redis µs per acquire that queues + its cancel, the account of 10 keys at its limit", unit: "µs"},
		{id: "k1000_sat_us", name: "… of 1,000 keys", unit: "µs", ceiling: "k10_sat_us"},
	},
	run: runAccounts,
}

const (
	acctOrgs    = 2
	acctKeys    = 3 // per organization
	acctBurst   = 30
	acctPeriod  = 10 * time.Second
	acctLatency = 20 * time.Millisecond
)

// acctVariant is what the pool is told of the organizations.
type acctVariant struct {
	tag, variant string
	accounts     bool   // declare pool.accounts
	limits       string // the accounts' limits (YAML flow sequence; "" none)
	keys         int    // keys in the pool per organization (the rest idle)
	orgs         int
}

func runAccounts(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	told := fmt.Sprintf("[{rate: %d/%s, burst: %d}]", acctBurst, acctPeriod, acctBurst)
	for _, v := range []struct {
		pfx string
		v   acctVariant
	}{
		{"a_", acctVariant{tag: "accta", variant: "keyfleet: 2 workers, 2 accounts × 3 keys, limits told", accounts: true, limits: told, keys: acctKeys, orgs: acctOrgs}},
		{"b_", acctVariant{tag: "acctb", variant: "keyfleet: 2 workers, 2 accounts × 3 keys, headers only", accounts: true, keys: acctKeys, orgs: acctOrgs}},
		{"b0_", acctVariant{tag: "acctb0", variant: "keyfleet: 2 workers, 6 keys without accounts, headers only", keys: acctKeys, orgs: acctOrgs}},
		{"c_", acctVariant{tag: "acctc", variant: "keyfleet: 2 workers, one key of an account, limits told", accounts: true, limits: told, keys: 1, orgs: 1}},
	} {
		per1000, ratio, use, err := runAccountFleet(ctx, e, r, v.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.v.tag, err)
		}
		smp.cpu = append(smp.cpu, use)
		if v.pfx != "c_" {
			smp.values[v.pfx+"per1000"] = per1000
		}
		smp.values[v.pfx+"ratio"] = ratio
	}
	pairs := pick(r.quick, 2000, 300)
	flat, _ := creds.ParseLimit("rate=1000000/m")
	share, _ := creds.ParseLimit("rate=125000/m")
	keys := make([]creds.Credential, 64)
	for i := range keys {
		keys[i] = creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: 1, Limits: []creds.Limit{share, flat}}
	}
	us, use, err := acquireRoomDefs(ctx, e, creds.Definitions{Credentials: keys}, pairs, "acquire+release, 64 keys, two limits each (in process)")
	if err != nil {
		return nil, err
	}
	smp.values["flat_us"] = us
	smp.cpu = append(smp.cpu, use)
	d := creds.Definitions{Accounts: []creds.Account{{ID: "org", Limits: []creds.Limit{flat}}}}
	for p := range 8 {
		d.Accounts = append(d.Accounts, creds.Account{ID: fmt.Sprintf("proj%d", p), Account: "org", Limits: []creds.Limit{flat}})
	}
	for i := range keys {
		d.Credentials = append(d.Credentials, creds.Credential{ID: keys[i].ID, MaxConcurrent: 1, Account: fmt.Sprintf("proj%d", i%8)})
	}
	if us, use, err = acquireRoomDefs(ctx, e, d, pairs, "acquire+release, 64 keys in 8 projects in an organization (in process)"); err != nil {
		return nil, err
	}
	smp.values["chain_us"] = us
	smp.values["chain_ratio"] = us / smp.values["flat_us"]
	smp.cpu = append(smp.cpu, use)
	for _, n := range []int{10, 1000} {
		d := creds.Definitions{Accounts: []creds.Account{{ID: "org", Limits: []creds.Limit{flat}}}}
		for i := range n {
			d.Credentials = append(d.Credentials, creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: 1, Account: "org"})
		}
		if us, use, err = acquireRoomDefs(ctx, e, d, pairs, fmt.Sprintf("acquire+release, one account of %d keys (in process)", n)); err != nil {
			return nil, err
		}
		smp.values[fmt.Sprintf("k%d_us", n)] = us
		smp.cpu = append(smp.cpu, use)
		one, _ := creds.ParseLimit("rate=1/h")
		d.Accounts[0].Limits = []creds.Limit{one}
		if us, use, err = acquireSaturatedDefs(ctx, e, d, pick(r.quick, 600, 100), fmt.Sprintf("acquire that queues + cancel, an account of %d keys at its limit (in process)", n)); err != nil {
			return nil, err
		}
		smp.values[fmt.Sprintf("k%d_sat_us", n)] = us
		smp.cpu = append(smp.cpu, use)
	}
	return smp, nil
}

// runAccountFleet runs one fleet of scenario 18 for k windows and returns
// its 429s per 1,000 requests and its requests ÷ allowed.
func runAccountFleet(ctx context.Context, e *env, r runInfo, v acctVariant) (float64, float64, CPUUse, error) {
	k := pick(r.quick, 3, 1)
	window := time.Duration(k) * acctPeriod
	allowed := float64(v.orgs) * (acctBurst + acctBurst*window.Seconds()/acctPeriod.Seconds())
	n := int(allowed * 1.5)
	var ids []string
	var keys []fakeapi.Key
	var accounts []fakeapi.Account
	for o := range v.orgs {
		org := fmt.Sprintf("org-%d", o)
		accounts = append(accounts, fakeapi.Account{ID: org, Rate: ratelimit.Limit{N: acctBurst, Period: acctPeriod}})
		for i := range v.keys {
			ids = append(ids, fmt.Sprintf("o%dk%d", o, i))
			keys = append(keys, fakeapi.Key{Account: org})
		}
	}
	api, err := startAPI(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: keys, Accounts: accounts, Latency: acctLatency}, ids)
	if err != nil {
		return 0, 0, CPUUse{}, err
	}
	defer api.close()
	spec := fleetSpec{concurrency: 12, httpURL: strings.TrimSuffix(api.url, "/v1/bench"), provider: provider.OpenAI}
	for i, id := range ids {
		c := credSpec{id: id, max: 4}
		if v.accounts {
			c.account = fmt.Sprintf("org-%d", i/v.keys)
		}
		spec.creds = append(spec.creds, c)
	}
	if v.accounts {
		for o := range v.orgs {
			spec.accounts = append(spec.accounts, accountSpec{id: fmt.Sprintf("org-%d", o), limits: v.limits})
		}
	}
	payload := func(id string) []byte {
		return fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"item %s"}],"max_tokens":16}`, id)
	}
	var t0 time.Time
	stop := api.windowFromFirst(window, &t0)
	use, _, err := e.runHTTPFleet(ctx, v.tag, spec, n, 2, v.variant, payload, stop)
	if err != nil {
		return 0, 0, CPUUse{}, err
	}
	var oks float64
	for _, ev := range api.events() {
		if ev.status == http.StatusOK && ev.at.Before(t0.Add(window)) {
			oks++
		}
	}
	st := api.api.Stats()
	var requests, limited int64
	for _, ks := range st.Keys {
		requests += ks.Requests
	}
	for _, a := range st.Accounts {
		limited += a.RateLimited
	}
	return 1000 * float64(limited) / float64(max(requests, 1)), oks / allowed, use, nil
}

// acquireRoomDefs is acquireRoom on a pool defined by d.
func acquireRoomDefs(ctx context.Context, e *env, d creds.Definitions, pairs int, variant string) (float64, CPUUse, error) {
	defer e.flushAfter(ctx)
	hs, err := e.openHandles(e.uniq("acct"), 1)
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer hs.close()
	p := hs.pools[0]
	if err := p.Define(ctx, d); err != nil {
		return 0, CPUUse{}, err
	}
	if err := acquireRelease(ctx, p); err != nil {
		return 0, CPUUse{}, err
	}
	return e.batchedEvalCost(ctx, pairs, variant, func() error { return acquireRelease(ctx, p) })
}

// acquireSaturatedDefs measures scenario 9's saturated case on a pool
// defined by d whose limits one acquire+release uses up: each acquire
// then queues and is cancelled.
func acquireSaturatedDefs(ctx context.Context, e *env, d creds.Definitions, ops int, variant string) (float64, CPUUse, error) {
	defer e.flushAfter(ctx)
	hs, err := e.openHandles(e.uniq("acctsat"), 1)
	if err != nil {
		return 0, CPUUse{}, err
	}
	defer hs.close()
	p := hs.pools[0]
	if err := p.Define(ctx, d); err != nil {
		return 0, CPUUse{}, err
	}
	if err := acquireRelease(ctx, p); err != nil {
		return 0, CPUUse{}, err
	}
	waitq := p.KeyPrefix() + "waitq"
	if err := queueAndCancel(ctx, e, p, waitq); err != nil {
		return 0, CPUUse{}, err
	}
	return e.batchedEvalCost(ctx, ops, variant, func() error { return queueAndCancel(ctx, e, p, waitq) })
}
