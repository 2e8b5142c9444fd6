package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Scenario 13g: what a budget costs, and how much of it a batch gets to
// spend (issue 34).
//
//   - Redis µs per start, in process (pkg/creds and internal/spend on the
//     bench's Redis, 64 keys of one limit each, one start at a time): a
//     provider item without a budget is an acquire, its release and the
//     settlement of its cost into the spend ledger (what every priced
//     provider run records); under a budget the start also reserves its
//     ceiling, and its settlement replaces the reservation. Server time of
//     the scripts (INFO commandstats), the median of 10 batches, as
//     scenario 9. The figure is the ratio taken in one run.
//   - Budget utilization, through real worker processes (2 × 16 slots, 8
//     keys of the strict OpenAI stand-in, provider kind openai): a batch
//     of 3,000 chat requests (gpt-4o-mini, max_tokens 40) with a budget of
//     0.01 runs until it pauses for its budget; once the stand-in's
//     recorded usage stops growing, that usage at the prices ÷ the budget.
//     Never above 1 (an overspend), and as close to it as the ceiling of
//     the starts still running when the room ran out allows.
var spendScenario = &scenario{
	name:  "spend",
	title: "13g. Budgets: Redis cost per start, and the share of a budget spent",
	figures: []figSpec{
		{id: "plain_us", name: "Redis µs per start: acquire + release (no spend)", unit: "µs"},
		{id: "nobudget_us", name: "Redis µs per start, provider item without a budget (its spend settled)", unit: "µs"},
		{id: "budget_us", name: "Redis µs per start under a budget (reserve, then settle)", unit: "µs"},
		{id: "budget_ratio", name: "… under a budget ÷ without", unit: "ratio", goal: atMost(1.15),
			note: "per run: the median over 10 batches of each batch's under-a-budget ÷ without, measured one after the other"},
		{id: "utilization", name: "budget utilization: the API's usage at the prices when the batch paused ÷ its budget", unit: "fraction",
			goal: atLeast(0.95)},
		{id: "overspend", name: "the API's usage at the prices above the budget", unit: "fraction", goal: never("<=", 0)},
	},
	run: runSpend,
}

// spendPrice is the model's price in the scenario.
var spendPrice = spend.Price{Input: 0.15, Output: 0.60}

const spendModel = "gpt-4o-mini"

func runSpend(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	if err := spendRedisCost(ctx, e, smp, pick(r.quick, 3000, 300)); err != nil {
		return nil, err
	}
	if err := spendUtilization(ctx, e, smp, pick(r.quick, 3000, 400), r.quick); err != nil {
		return nil, err
	}
	return smp, nil
}

// spendRedisCost measures the three ways a start can go, on one pool.
func spendRedisCost(ctx context.Context, e *env, smp *sample, n int) error {
	defer e.flushAfter(ctx)
	name := e.uniq("spend")
	hs, err := e.openHandles(name, 1)
	if err != nil {
		return err
	}
	defer hs.close()
	p := hs.pools[0]
	lim, err := creds.ParseLimit("rate=1000000/m")
	if err != nil {
		return err
	}
	if err := registerLimited(ctx, p, acquireLimitKeys, 1, []creds.Limit{lim}); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 2, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	ledger := spend.NewLedger(rdb, name)
	const batch = "spend-bench"
	if _, err := ledger.SetBatchBudget(ctx, batch, 1_000_000*spend.Unit); err != nil {
		return err
	}
	ceiling := spendPrice.Ceiling(180, 40)
	cost := spendPrice.Of(30, 40, 1)
	seq := 0
	plain := func() error { return acquireRelease(ctx, p) }
	noBudget := func() error {
		l, err := p.Acquire(ctx, "bench")
		if err != nil {
			return fmt.Errorf("bench: acquire: %w", err)
		}
		if err := p.Release(ctx, l); err != nil {
			return fmt.Errorf("bench: release: %w", err)
		}
		return ledger.Settle(ctx, "w:unreserved", cost, "other-batch", "", "")
	}
	withBudget := func() error {
		l, err := p.Acquire(ctx, "bench")
		if err != nil {
			return fmt.Errorf("bench: acquire: %w", err)
		}
		seq++
		token := "w:" + strconv.Itoa(seq)
		v, err := ledger.Reserve(ctx, spend.Reservation{Token: token, Amount: ceiling, Batch: batch, Expires: time.Now().Add(time.Hour)})
		if err != nil {
			return err
		}
		if !v.OK {
			return fmt.Errorf("bench: the reservation was refused: %+v", v)
		}
		if err := p.Release(ctx, l); err != nil {
			return fmt.Errorf("bench: release: %w", err)
		}
		return ledger.Settle(ctx, token, cost, batch, "", "")
	}
	// One of each first: the scripts are loaded, the connections open.
	for _, op := range []func() error{plain, noBudget, withBudget} {
		if err := op(); err != nil {
			return err
		}
	}
	// The three interleaved, batch by batch: each batch's ratio is taken
	// between phases a few milliseconds apart, so that a moment in which
	// Redis lost its CPU moves all three alike; the figures are the
	// medians over the batches.
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	var plainUs, noUs, withUs, ratios []float64
	k := max(1, n/acquireBatches)
	for range acquireBatches {
		var per [3]float64
		for i, op := range []func() error{plain, noBudget, withBudget} {
			s0, err := e.evalStats(ctx)
			if err != nil {
				return err
			}
			for range k {
				if err := op(); err != nil {
					return err
				}
			}
			s1, err := e.evalStats(ctx)
			if err != nil {
				return err
			}
			per[i] = float64(s1.usec-s0.usec) / float64(k)
		}
		plainUs, noUs, withUs = append(plainUs, per[0]), append(noUs, per[1]), append(withUs, per[2])
		if per[1] > 0 {
			ratios = append(ratios, per[2]/per[1])
		}
	}
	use, err := m.done(ctx, "starts: plain, without a budget, under one, interleaved (in process)", 3*k*acquireBatches, time.Since(start), nil)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values["plain_us"], smp.values["nobudget_us"], smp.values["budget_us"] = median(plainUs), median(noUs), median(withUs)
	smp.values["budget_ratio"] = median(ratios)
	return nil
}

// spendUtilization runs a batch under a budget until it pauses.
func spendUtilization(ctx context.Context, e *env, smp *sample, n int, quick bool) error {
	const keys = 8
	ids := credIDs("s", keys)
	fk := make([]fakeapi.Key, keys)
	for i, id := range ids {
		fk[i] = fakeapi.Key{Secret: secretOf(id)}
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: fk, Latency: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	fs := fleetSpec{concurrency: 16, httpURL: srv.URL, provider: provider.OpenAI, scope: provider.ScopeField,
		prices: fmt.Sprintf("{%s: {input: %v, output: %v}}", spendModel, spendPrice.Input, spendPrice.Output)}
	for _, id := range ids {
		fs.creds = append(fs.creds, credSpec{id: id, max: 4})
	}
	f, err := e.newFleet(ctx, "spend", fs)
	if err != nil {
		return err
	}
	defer f.close(ctx)
	budget := spend.Unit / 100 // 0.01
	if quick {
		budget = spend.Unit / 1000
	}
	payload := func(id string) []byte {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"Item %s: %s"}],"max_tokens":40}`,
			spendModel, id, strings.Repeat("summarise the news ", 4))
	}
	if err := f.enqueueKind(ctx, "http", n, payload); err != nil {
		return err
	}
	if _, err := f.q.SetBudget(ctx, f.batch, &budget); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 2, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	if _, err := spend.NewLedger(rdb, f.pool).SetBatchBudget(ctx, f.batch, budget); err != nil {
		return err
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	for i := range 2 {
		if _, err := f.startWorker(fmt.Sprintf("w%d", i+1)); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 3*time.Minute, func() (bool, error) {
		rec, err := f.q.Batch(ctx, f.batch)
		return err == nil && rec.State == kftype.BatchPaused && rec.PausedReason == spend.ReasonBudget, nil
	}); err != nil {
		return fmt.Errorf("bench: the batch never paused for its budget: %w\n%s", err, f.workerLogs())
	}
	// The starts running when it paused finish.
	var atAPI spend.Amount
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		before := spentAt(api)
		if err := ctxsleep.Sleep(ctx, 300*time.Millisecond); err != nil {
			return false, err
		}
		atAPI = spentAt(api)
		return atAPI == before, nil
	}); err != nil {
		return err
	}
	use, _, err := f.finish(ctx, m, "2 workers × 16 slots, a batch under a budget until it pauses", n)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values["utilization"] = float64(atAPI) / float64(budget)
	smp.values["overspend"] = max(0, float64(atAPI-budget)/float64(budget))
	return nil
}

// spentAt is what the stand-in's recorded real-time usage costs.
func spentAt(api *fakeapi.Server) spend.Amount {
	u := api.Stats().ModelUsage()[spendModel]
	return spendPrice.Of(u.RealTime.InputTokens, u.RealTime.OutputTokens, 1)
}

// waitFor polls cond every 50 ms until it holds, fails, or within ends.
func waitFor(ctx context.Context, within time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if err := ctxsleep.Sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("not within %s: %w", within, err)
		}
	}
}
