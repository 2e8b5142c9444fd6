package batchapi_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// prices are the test's: whole billionths per token at half price, so
// sums of rounded costs are exact.
var prices = map[string]spend.Price{
	"gpt-4o-mini":       {Input: 0.15, Output: 0.60},
	"claude-sonnet-4-6": {Input: 3.00, Output: 15.00},
}

// priced gives the environment's configuration the test's prices and
// returns the pool's spend ledger.
func (e *env) priced() *spend.Ledger {
	e.cfg.Pool.Prices = prices
	return spend.NewLedger(e.rdb, e.cfg.Pool.Name)
}

// boundedLine is an item line whose request names its max output tokens
// (as a budget needs).
func (e *env) boundedLine(id, text string) string {
	if e.prov == fakeapi.ProviderAnthropic {
		return e.line(id, text) // max_tokens 20
	}
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":%q}]}}`, id, text)
}

func (e *env) boundedItems(n int, text func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = e.boundedLine(fmt.Sprintf("item-%04d", i), text(i))
	}
	return out
}

// withBudget enqueues with a budget of amount (kept in l).
func withBudget(l *spend.Ledger, amount spend.Amount) func(*enqueue.Request) {
	return func(r *enqueue.Request) { r.Budget, r.Ledger = &amount, l }
}

// spent reads batch's account.
func spent(t *testing.T, l *spend.Ledger, batch string) spend.Account {
	t.Helper()
	b, _, err := l.Read(ctx(t), batch, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSpend checks that each result of batch carries its reply's usage
// at the model's price, half off, and that the ledger's spent for the
// batch and the stand-in's Batch API usage at that price are their sum.
func (e *env) checkSpend(l *spend.Ledger, batch string) spend.Amount {
	e.t.Helper()
	price := prices[e.model()]
	var sum spend.Amount
	counted := 0
	for id, r := range e.results(batch) {
		u, ok := provider.ReadUsage([]byte(r.Output))
		want := spend.Amount(0)
		if ok {
			want = price.Of(u.Input, u.Output, 0.5)
			counted++
		}
		if r.Spend != want || (r.Outcome == kftype.OutcomeSucceeded && want == 0) {
			e.t.Errorf("%s: spend %v, want %v (usage %+v at %+v, half off)", id, r.Spend, want, u, price)
		}
		sum += r.Spend
	}
	if counted == 0 {
		e.t.Fatal("no result says its usage")
	}
	if got := spent(e.t, l, batch); got.Spent != sum || got.Reserved != 0 {
		e.t.Errorf("the ledger's batch %s: spent %v, reserved %v; want spent %v (the results' sum), reserved 0", batch, got.Spent, got.Reserved, sum)
	}
	bu := e.api.Stats().ModelUsage()[e.model()].Batch
	if api := price.Of(bu.InputTokens, bu.OutputTokens, 0.5); api != sum {
		e.t.Errorf("the stand-in billed %d+%d tokens through the Batch API, %v at half price; the results say %v", bu.InputTokens, bu.OutputTokens, api, sum)
	}
	return sum
}

// A batch through the Batch API costs its replies' usage at the model's
// price times pool.batch_api_discount (0.5 by default): each result says
// its own, the ledger's spent for the batch is their sum, and so is what
// the stand-in billed through its Batch API at that price; the worker's
// keyfleet_spend_total counts it. An item that goes to real time (a 500
// in its provider batch) costs nothing there.
func TestSpendThroughBatchAPI(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			l := e.priced()
			if e.cfg.Pool.BatchAPIDiscount != config.BatchAPIDiscountDefault || config.BatchAPIDiscountDefault != 0.5 {
				t.Fatalf("batch_api_discount %v, want the default 0.5", e.cfg.Pool.BatchAPIDiscount)
			}
			e.enqueue("s1", e.items(12, func(i int) string {
				if i == 3 {
					return "q [fake:status=500]"
				}
				return fmt.Sprintf("question number %d [fake:output_tokens=%d]", i, 3+i)
			}))
			m := metrics.New()
			r := e.runner(func(o *batchapi.Options) {
				o.Bounds = map[string]batchapi.Bounds{prov: {MaxRequests: 5, MaxBytes: 1 << 20}}
				o.Metrics = m
			})
			e.until(r, "every provider batch done", func() bool { return len(e.records("s1")) == 3 && e.allDone("s1") })
			if n := len(e.results("s1")); n != 11 {
				t.Fatalf("%d results, want 11 (one item back in real time)", n)
			}
			sum := e.checkSpend(l, "s1")
			if got := spendMetric(t, m, e.model()); math.Abs(got-sum.Float()) > 1e-12 {
				t.Errorf("keyfleet_spend_total %v, want %v", got, sum.Float())
			}
		})
	}
}

// A worker dies while a record's results are being collected (or just
// after it reserved its spend); another collects them again: the ledger
// counts the record's cost once (its settle and its mark are one
// transaction), its reservation is gone, and no provider batch is made
// twice.
func TestCrashRecollectingSettlesOnce(t *testing.T) {
	cases := []struct {
		point  string
		budget bool
	}{
		{"spend-settled", false},
		{"real-time-sent", false},
		{"reserved", true},
		{"results-recorded", true},
		{"spend-settled", true},
	}
	for _, prov := range providers {
		for _, c := range cases {
			name := fmt.Sprintf("%s/%s/budget=%v", prov, c.point, c.budget)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, prov)
				l := e.priced()
				var mod func(*enqueue.Request)
				if c.budget {
					mod = withBudget(l, spend.Unit)
				}
				e.enqueueWith("k1", e.boundedItems(8, func(i int) string {
					if i == 2 {
						return "q [fake:status=500]" // one to real time: the last step has work
					}
					return fmt.Sprintf("q%d [fake:output_tokens=%d]", i, 2+i)
				}), e.clock.now().Add(24*time.Hour), mod)
				bounds := func(o *batchapi.Options) {
					o.Bounds = map[string]batchapi.Bounds{prov: {MaxRequests: 5, MaxBytes: 1 << 20}}
				}
				a := e.runner(bounds)
				var crashed atomic.Bool
				batchapi.SetCrash(a, func(p string) bool { return p == c.point && crashed.CompareAndSwap(false, true) })
				deadline := time.Now().Add(30 * time.Second)
				for !crashed.Load() {
					if time.Now().After(deadline) {
						t.Fatalf("never reached %s", c.point)
					}
					if err := e.step(a); errors.Is(err, batchapi.ErrCrash) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				b := e.runner(bounds)
				e.until(b, "every record done", func() bool { return len(e.records("k1")) == 2 && e.allDone("k1") })
				if got := e.created(); got != 2 {
					t.Errorf("%d provider batches created, want 2", got)
				}
				e.checkSpend(l, "k1")
			})
		}
	}
}

// ceiling is the most the staged items of batch can cost through the
// Batch API, as a budget reserves it: each request's input a token per
// byte and its max_tokens, at the model's price, half off (rounded up).
func (e *env) ceiling(batch string) spend.Amount {
	e.t.Helper()
	subjects, err := e.q.StagedSubjects(ctx(e.t), batch)
	if err != nil || len(subjects) != 1 {
		e.t.Fatalf("staged subjects %v %v, want one", subjects, err)
	}
	spec, _ := provider.Lookup(e.prov)
	price := prices[e.model()]
	var sum spend.Amount
	for _, subj := range slices.Collect(maps.Keys(subjects)) {
		for seq := uint64(1); ; {
			m, err := e.q.NextStaged(ctx(e.t), subj, seq)
			if err != nil {
				e.t.Fatal(err)
			}
			if m == nil {
				break
			}
			in, out, given := provider.Ceiling(m.Item.Payload, spec.Endpoint)
			if !given {
				e.t.Fatalf("item %s names no max_tokens", m.Item.ID)
			}
			sum += price.Ceiling(in, out)
			seq = m.Seq + 1
		}
	}
	return spend.Amount(math.Ceil(float64(sum) * 0.5))
}

// A batch whose budget is one billionth short of its first request's
// most spend (half price) makes no provider batch: nothing is cut off for
// it (split_test.go has the cuts), the batch is paused with the reason
// budget, nothing is spent or held, and further steps create nothing. A tenant's budget that cannot cover it pauses every
// running batch of the tenant, with the reason tenant-budget. A model
// without a price under a budget reserves nothing and sends the items to
// real time (where each is dead-lettered, naming the model).
func TestBudgetTooSmallCreatesNothing(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov+"/batch", func(t *testing.T) {
			e := newEnv(t, prov)
			l := e.priced()
			e.enqueueWith("c1", e.boundedItems(5, func(i int) string { return fmt.Sprintf("question %d", i) }),
				e.clock.now().Add(24*time.Hour), withBudget(l, spend.Unit))
			need := e.ceiling("c1")
			if _, err := l.SetBatchBudget(ctx(t), "c1", e.prefixCeilings("c1")[1]-1); err != nil {
				t.Fatal(err)
			}
			r := e.runner(nil)
			e.until(r, "the batch paused (or a provider batch created)", func() bool {
				return e.batchState("c1").State == kftype.BatchPaused || e.created() > 0
			})
			for range 5 {
				e.step(r)
			}
			if b := e.batchState("c1"); b.PausedReason != spend.ReasonBudget {
				t.Errorf("paused for %q, want %q", b.PausedReason, spend.ReasonBudget)
			}
			if got := e.created(); got != 0 {
				t.Errorf("%d provider batches created, want none", got)
			}
			if a := spent(t, l, "c1"); a.Spent != 0 || a.Reserved != 0 || a.Need != need {
				t.Errorf("the ledger: %+v, want nothing spent or reserved, %v needed", a, need)
			}
			for _, p := range e.records("c1") {
				if p.State != queue.PBStaged || p.Items != 5 {
					t.Errorf("record %s is %s with %d items, want staged whole", p.ID, p.State, p.Items)
				}
			}
		})
		t.Run(prov+"/tenant", func(t *testing.T) {
			e := newEnv(t, prov)
			e.priced()
			e.cfg.Tenants = map[string]config.Tenant{"research": {Weight: 1, Budget: "0.000001/d"}}
			tenant := func(r *enqueue.Request) { r.Tenant = "research" }
			e.enqueueWith("t1", e.boundedItems(3, func(i int) string { return fmt.Sprintf("question %d", i) }), e.clock.now().Add(24*time.Hour), tenant)
			e.enqueueWith("t2", e.boundedItems(3, func(i int) string { return fmt.Sprintf("other %d", i) }), e.clock.now().Add(48*time.Hour), tenant)
			r := e.runner(nil)
			e.until(r, "both batches paused (or a provider batch created)", func() bool {
				return e.batchState("t1").State == kftype.BatchPaused && e.batchState("t2").State == kftype.BatchPaused || e.created() > 0
			})
			for _, id := range []string{"t1", "t2"} {
				if b := e.batchState(id); b.PausedReason != spend.ReasonTenantBudget {
					t.Errorf("%s paused for %q, want %q", id, b.PausedReason, spend.ReasonTenantBudget)
				}
			}
			if got := e.created(); got != 0 {
				t.Errorf("%d provider batches created, want none", got)
			}
		})
		t.Run(prov+"/unpriced", func(t *testing.T) {
			e := newEnv(t, prov)
			l := spend.NewLedger(e.rdb, e.cfg.Pool.Name) // no prices
			e.enqueueWith("u1", e.boundedItems(3, func(i int) string { return fmt.Sprintf("question %d", i) }),
				e.clock.now().Add(24*time.Hour), withBudget(l, spend.Unit))
			r := e.runner(nil)
			e.until(r, "the record done", func() bool { return e.allDone("u1") })
			if got := e.created(); got != 0 {
				t.Errorf("%d provider batches created, want none", got)
			}
			e.wantOnLane("u1", 3)
			if a := spent(t, l, "u1"); a.Spent != 0 || a.Reserved != 0 {
				t.Errorf("the ledger: %+v, want nothing", a)
			}
		})
	}
}

// A batch whose budget covers its provider batch's most spend at half
// price exactly (not at full price) runs through the Batch API: its
// spend, settled in place of the reservation, is within the budget and
// is the results' sum.
func TestBudgetCoversBatch(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			l := e.priced()
			e.enqueueWith("d1", e.boundedItems(5, func(i int) string { return fmt.Sprintf("question %d [fake:output_tokens=%d]", i, 5+i) }),
				e.clock.now().Add(24*time.Hour), withBudget(l, spend.Unit))
			budget := e.ceiling("d1")
			if _, err := l.SetBatchBudget(ctx(t), "d1", budget); err != nil {
				t.Fatal(err)
			}
			r := e.runner(nil)
			e.until(r, "the provider batch done (or the batch paused)", func() bool {
				return e.allDone("d1") || e.batchState("d1").State == kftype.BatchPaused
			})
			if got := e.created(); got != 1 {
				t.Errorf("%d provider batches created, want 1", got)
			}
			if b := e.batchState("d1"); b.State != kftype.BatchRunning {
				t.Errorf("the batch is %s (%s), want running", b.State, b.PausedReason)
			}
			if n := len(e.results("d1")); n != 5 {
				t.Fatalf("%d results, want 5", n)
			}
			sum := e.checkSpend(l, "d1")
			if sum == 0 || sum > budget {
				t.Errorf("spent %v of a budget of %v", sum, budget)
			}
		})
	}
}

// batchState reads batch's record.
func (e *env) batchState(batch string) kftype.BatchInfo {
	e.t.Helper()
	b, err := e.q.Batch(ctx(e.t), batch)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// spendMetric reads keyfleet_spend_total{tenant="",model}.
func spendMetric(t *testing.T, m *metrics.Metrics, model string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "keyfleet_spend_total" {
			continue
		}
		for _, c := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range c.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["model"] == model && labels["tenant"] == "" {
				return c.GetCounter().GetValue()
			}
		}
	}
	return 0
}
