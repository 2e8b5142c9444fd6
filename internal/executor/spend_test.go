package executor

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// fakeBudgets is what binds the test's batch, and the pauses asked of it.
type fakeBudgets struct {
	tenant  string
	budget  bool
	err     error
	mu      sync.Mutex
	paused  []string // "<batch> <reason>"
	already bool     // another worker paused it first
}

func (b *fakeBudgets) Binding(context.Context, string) (string, bool, error) {
	return b.tenant, b.budget, b.err
}

func (b *fakeBudgets) PauseFor(_ context.Context, batch, reason string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.paused = append(b.paused, batch+" "+reason)
	return !b.already, nil
}

const (
	spendTestModel = "gpt-4o-mini"
	// spendTestBody is a request of 40 output tokens at most.
	spendTestBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":40}`
)

var spendTestPrice = spend.Price{Input: 0.15, Output: 0.60}

// replied is a provider's reply that used in and out tokens.
func replied(in, out int64) runFunc {
	return func(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
		return jobs.Output{Body: []byte(`{"ok":1}`), Status: 200, Usage: &provider.Usage{Input: in, Output: out, Total: in + out}}, nil
	}
}

// lostReply is a request that left and got no reply.
func lostReply(context.Context, jobs.Item, jobs.Credential) (jobs.Output, error) {
	return jobs.Output{Sent: time.Now()}, errors.New("Post \"https://api.openai.com/v1/chat/completions\": context deadline exceeded")
}

// Every way a start meets the spend ledger, in process against a real
// redis-server: what the item became, what ran, what the ledger holds
// after, and which pauses were asked.
func TestExecuteSpend(t *testing.T) {
	srv := redistest.Start(t)
	ceiling := spendTestPrice.Ceiling(int64(len(spendTestBody)), 40)
	cost := spendTestPrice.Of(12, 30, 1)
	for _, c := range []struct {
		name   string
		budget spend.Amount // the batch's (0: none)
		tenant *spend.Budget
		live   *spend.Budget // the tenant's live budget (producer tenant set)
		model  string        // the item's (default spendTestModel)
		body   string        // its payload (default spendTestBody)
		held   spend.Amount  // reserved by another start beforehand
		runs   []runFunc
		want   Outcome
		// spent and reserved: the batch's account after; paused: the
		// pauses asked; ran: whether a request left.
		spent, reserved spend.Amount
		paused          []string
		ran             bool
		check           func(t *testing.T, h *harness)
	}{
		{
			name: "without a budget: it runs, and its spend is recorded all the same",
			runs: []runFunc{replied(12, 30)}, want: Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			spent: cost, ran: true,
			check: func(t *testing.T, h *harness) {
				if got := h.rec.results[0].Spend; got != cost {
					t.Errorf("result spend %s, want %s", got, cost)
				}
			},
		},
		{
			name:   "under a budget that covers it: the reply's usage replaces the reservation",
			budget: spend.Unit, runs: []runFunc{replied(12, 30)}, want: Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			spent: cost, ran: true,
			check: func(t *testing.T, h *harness) {
				if got := h.rec.results[0].Spend; got != cost {
					t.Errorf("result spend %s, want %s", got, cost)
				}
			},
		},
		{
			name:   "a budget that cannot cover the start: the batch pauses, nothing runs",
			budget: ceiling - 1,
			want:   Outcome{Fate: HandedBack, Cause: ErrBudgetSpent, Reply: ReplyNak, Delay: budgetWait},
			paused: []string{"b1 budget"},
		},
		{
			name:   "the room held by a running start: the item waits, no pause",
			budget: 2*ceiling - 1, held: ceiling,
			want:     Outcome{Fate: HandedBack, Cause: ErrBudgetHeld, Reply: ReplyNak, Delay: budgetWait},
			reserved: ceiling,
		},
		{
			name:   "a tenant's budget of the day that cannot cover it: the tenant's batches pause",
			tenant: &spend.Budget{Amount: ceiling - 1, Period: spend.Day},
			want:   Outcome{Fate: HandedBack, Cause: ErrBudgetSpent, Reply: ReplyNak, Delay: budgetWait},
			paused: []string{"b1 tenant-budget"},
		},
		{
			name:   "a tenant's budget raised live covers it: it runs, counted in the live budget's period",
			tenant: &spend.Budget{Amount: ceiling - 1, Period: spend.Day}, live: &spend.Budget{Amount: spend.Unit, Period: spend.Week},
			runs: []runFunc{replied(12, 30)}, want: Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			spent: cost, ran: true,
			check: func(t *testing.T, h *harness) {
				v, err := h.ledger.(*spend.Ledger).Tenant(context.Background(), "research", &spend.Budget{Amount: ceiling - 1, Period: spend.Day}, h.clk.Now())
				if err != nil || v.Source != spend.SourceLive || v.Period != spend.PeriodOf(spend.Week, h.clk.Now()) || v.Account.Spent != cost || v.Account.Reserved != 0 {
					t.Errorf("the tenant after the run: %+v %v, want %s spent in its live budget's week", v, err, cost)
				}
			},
		},
		{
			name:   "a tenant's budget lowered live cannot cover it: the tenant's batches pause",
			tenant: &spend.Budget{Amount: spend.Unit, Period: spend.Day}, live: &spend.Budget{Amount: ceiling - 1, Period: spend.Day},
			want:   Outcome{Fate: HandedBack, Cause: ErrBudgetSpent, Reply: ReplyNak, Delay: budgetWait},
			paused: []string{"b1 tenant-budget"},
		},
		{
			name:   "a tenant without a budget: its spend counts in the day",
			tenant: &spend.Budget{}, runs: []runFunc{replied(12, 30)}, want: Outcome{Fate: Succeeded, Reply: ReplyAck, Attempt: 1},
			spent: cost, ran: true,
			check: func(t *testing.T, h *harness) {
				v, err := h.ledger.(*spend.Ledger).Tenant(context.Background(), "research", nil, h.clk.Now())
				if err != nil || v.Source != spend.SourceNone || v.Account.Spent != cost {
					t.Errorf("the tenant after the run: %+v %v, want %s spent in the day", v, err, cost)
				}
			},
		},
		{
			name:   "an unpriced model under a budget: dead letter naming it, no key asked",
			budget: spend.Unit, model: "gpt-5-unpriced",
			body: strings.Replace(spendTestBody, spendTestModel, "gpt-5-unpriced", 1),
			want: Outcome{Fate: DeadLettered, Reason: "permanent failure", Reply: ReplyTerm},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; !strings.Contains(e, `"gpt-5-unpriced"`) || !strings.Contains(e, "price") {
					t.Errorf("dead letter error %q", e)
				}
				if len(h.pool.reqs) != 0 {
					t.Errorf("a key was asked for: %v", h.pool.reqs)
				}
			},
		},
		{
			name:   "a request without max_tokens under a budget: dead letter",
			budget: spend.Unit, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
			want: Outcome{Fate: DeadLettered, Reason: "permanent failure", Reply: ReplyTerm},
			check: func(t *testing.T, h *harness) {
				if e := h.rec.dead[0].Error; !strings.Contains(e, "max_tokens") {
					t.Errorf("dead letter error %q", e)
				}
			},
		},
		{
			name:   "a request that left with no reply counts its whole reservation",
			budget: spend.Unit, runs: []runFunc{lostReply},
			want:  Outcome{Fate: Retried, Reply: ReplyNak, Delay: time.Second, Attempt: 1, Failures: 1},
			spent: ceiling, ran: true,
		},
		{
			name:   "a reply that refused the request costs nothing",
			budget: spend.Unit, runs: []runFunc{fails(jobs.Permanent(errors.New("400 Bad Request")))},
			want:  Outcome{Fate: DeadLettered, Reason: "permanent failure", Reply: ReplyTerm, Attempt: 1, Failures: 1},
			spent: 0, ran: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t)
			pool := redistest.UniqueName(t)
			ledger := spend.NewLedger(srv.Client(t), pool)
			budgets := &fakeBudgets{budget: c.budget > 0}
			h.policy.Prices = spend.Prices{spendTestModel: spendTestPrice}
			if c.tenant != nil {
				budgets.tenant = "research"
				if c.tenant.Period != "" {
					h.policy.TenantBudgets = map[string]spend.Budget{"research": *c.tenant}
				}
			}
			if c.live != nil {
				if _, err := ledger.SetTenantBudget(ctx, "research", c.live, c.tenant, "alice@host", h.clk.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if c.budget > 0 {
				if _, err := ledger.SetBatchBudget(ctx, "b1", c.budget); err != nil {
					t.Fatal(err)
				}
			}
			if c.held > 0 {
				if v, err := ledger.Reserve(ctx, spend.Reservation{Token: "other", Amount: c.held, Batch: "b1", Expires: time.Now().Add(time.Hour)}); err != nil || !v.OK {
					t.Fatalf("%+v %v", v, err)
				}
			}
			h.ledger, h.budgets = ledger, budgets
			h.kind.Provider = true
			model, body := cmp.Or(c.model, spendTestModel), cmp.Or(c.body, spendTestBody)
			h.d.it.Scope, h.d.it.Payload = model, []byte(body)
			h.pool.grants = []grant{{key: "a"}}
			h.h.runs = c.runs
			runCtx, cancelRun := context.WithCancelCause(context.Background())
			defer cancelRun(nil)
			h.pool.exhausted = func() { cancelRun(errScriptOver) }
			h.start()
			got := h.e.Execute(context.Background(), runCtx, h.d)
			c.want.Kind = "sleep"
			checkOutcome(t, got, c.want)
			b, _, err := ledger.Read(ctx, "b1", "", "")
			if err != nil {
				t.Fatal(err)
			}
			if b.Spent != c.spent || b.Reserved != c.reserved {
				t.Errorf("the batch's account: spent %s reserved %s, want %s and %s", b.Spent, b.Reserved, c.spent, c.reserved)
			}
			if !slices.Equal(budgets.paused, c.paused) {
				t.Errorf("pauses asked: %q, want %q", budgets.paused, c.paused)
			}
			ran := slices.ContainsFunc(h.tr.get(), func(s string) bool { return strings.HasPrefix(s, "run ") })
			if ran != c.ran {
				t.Errorf("a request left: %v, want %v (trace %q)", ran, c.ran, h.tr.get())
			}
			if !c.ran && len(h.pool.reqs) > 0 && !slices.Contains(h.tr.get(), "release-unused a") {
				t.Errorf("the key granted to a start that did not run was not released unused: %q", h.tr.get())
			}
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}
