package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Ledger is the fleet-wide spend ledger (*spend.Ledger): a start under a
// budget reserves what it can cost at most, and every provider run's cost
// is settled into it.
type Ledger interface {
	Reserve(ctx context.Context, r spend.Reservation) (spend.Verdict, error)
	Settle(ctx context.Context, token string, actual spend.Amount, batch, tenant, period string) error
}

// Budgets is what binds a batch's spend, as the worker knows it.
type Budgets interface {
	// Binding is batch's tenant ("" none) and whether the batch has a
	// budget of its own, from its record (read when the worker has not
	// seen it yet).
	Binding(ctx context.Context, batch string) (tenant string, budget bool, err error)
	// PauseFor pauses batch for reason (spend.ReasonBudget; for
	// spend.ReasonTenantBudget, every running batch of its tenant) and
	// reports whether it paused any (another worker may have first).
	PauseFor(ctx context.Context, batch, reason string) (bool, error)
}

// budgetWait is how long an item waits when the budget's room is held by
// reservations of starts still running, or its batch was just paused for
// its budget.
const budgetWait = time.Second

// spending is what one start of an item has to do with spend.
type spending struct {
	// price is the item's model's price; priced: it has one.
	price  spend.Price
	priced bool
	// tenant, period: the item's batch's tenant and the current period
	// its spend counts in: of its budget (the configured one until a
	// reservation says which is in force), else the day ("" no tenant).
	tenant, period string
	// bound: a budget binds the item (its batch's or its tenant's): every
	// start reserves.
	bound bool
	// token names the current start's reservation ("" none made).
	token string
	// ceiling is what the current start reserved.
	ceiling spend.Amount
}

// spendOf reads what binds an item's spend before it looks for a key. An
// item that cannot start under its budget (its model has no price, or its
// request no bound on its output) is dead-lettered; one whose batch's
// record cannot be read goes back. It reports whether it settled the item.
func (e *Executor) spendOf(ctx context.Context, x *item) (Outcome, bool) {
	if e.ledger == nil || !x.kind.Provider {
		return Outcome{}, false
	}
	s := &x.spend
	s.price, s.priced = e.policy.Prices.Lookup(x.scope)
	tenant, batchBudget, err := e.budgets.Binding(ctx, x.it.Batch)
	if err != nil {
		x.log.Warn("cannot read what binds the batch's spend: handing the item back", zap.Error(err))
		sctx, cancel := e.settleCtx()
		defer cancel()
		if herr := x.runs.HandBack(sctx); herr != nil {
			x.log.Debug("recording the hand-back", zap.Error(herr))
		}
		return x.handedBack(ErrSpendNotReserved, e.nak(x, budgetWait), budgetWait), true
	}
	s.tenant = tenant
	tb, tenantBudget := e.policy.TenantBudgets[tenant]
	if tenant != "" {
		s.period = spend.PeriodOf(cmp.Or(tb.Period, spend.Day), e.clock.Now())
	}
	s.bound = batchBudget || tenantBudget
	text := ""
	switch {
	case !s.bound:
		return Outcome{}, false
	case !s.priced:
		text = fmt.Sprintf("model %q has no price (pool.prices): an item cannot start under a budget without one", x.scope)
	default:
		if _, _, given := provider.Ceiling(x.it.Payload, x.it.Endpoint); given {
			return Outcome{}, false
		}
		text = "the request sets no max_tokens (or max_completion_tokens): an item cannot start under a budget without a bound on its output"
	}
	return e.deadLetter(x, kftype.ReasonPermanent, fmt.Sprintf("item %s: %s", x.it.ID, text)), true
}

// reserve takes what the start on lease can cost at most from the
// budgets that bind the item. When it cannot, it settles the item (the
// lease released unused) and reports false with the outcome: the item
// waits while the budget's room is held by running starts, and its batch
// is paused when the budget cannot cover it.
func (e *Executor) reserve(ctx context.Context, x *item, lease *creds.Lease) (Outcome, bool) {
	s := &x.spend
	s.token, s.ceiling = "", 0
	if !s.bound {
		return Outcome{}, true
	}
	in, out, _ := provider.Ceiling(x.it.Payload, x.it.Endpoint)
	s.ceiling = s.price.Ceiling(in, out)
	s.token = e.id + ":" + strconv.FormatUint(lease.Token, 10)
	tenantLimit := spend.NoLimit
	if tb, ok := e.policy.TenantBudgets[s.tenant]; ok {
		tenantLimit = tb.Amount
	}
	now := e.clock.Now()
	v, err := e.ledger.Reserve(ctx, spend.Reservation{
		Token: s.token, Amount: s.ceiling, Batch: x.it.Batch,
		Tenant: s.tenant, Period: s.period, TenantBudget: tenantLimit,
		At: now, Expires: now.Add(e.policy.reservationTTL(x.kind)),
	})
	if err == nil && v.OK {
		if v.Period != "" {
			s.period = v.Period // a live budget of another kind than the configured one
		}
		return Outcome{}, true
	}
	s.token = ""
	e.releaseUnused(lease, x.log)
	sctx, cancel := e.settleCtx()
	defer cancel()
	if herr := x.runs.HandBack(sctx); herr != nil {
		x.log.Debug("recording the hand-back", zap.Error(herr))
	}
	switch {
	case err != nil:
		e.host.RedisUp(false)
		x.log.Warn("cannot reserve the start's spend in Redis: handing the item back", zap.Error(err))
		return x.handedBack(ErrSpendNotReserved, e.nak(x, budgetWait), budgetWait), false
	case v.Wait:
		x.log.Debug("the budget's room is held by running items: waiting", zap.String("budget", v.Exhausted),
			zap.Stringer("left", v.Left), zap.Stringer("need", s.ceiling))
		return x.handedBack(ErrBudgetHeld, e.nak(x, budgetWait), budgetWait), false
	}
	switch paused, perr := e.budgets.PauseFor(sctx, x.it.Batch, v.Exhausted); {
	case perr != nil:
		x.log.Warn("could not pause the batch for its budget: its items keep waiting", zap.String("budget", v.Exhausted), zap.Error(perr))
	case paused:
		x.log.Info("the budget cannot cover the next start: the batch is paused", zap.String("budget", v.Exhausted),
			zap.String("tenant", s.tenant), zap.Stringer("left", v.Left), zap.Stringer("need", s.ceiling))
	}
	return x.handedBack(ErrBudgetSpent, e.nak(x, budgetWait), budgetWait), false
}

// unreserve gives back a reservation whose start never ran.
func (e *Executor) unreserve(x *item) {
	if x.spend.token == "" {
		return
	}
	ctx, cancel := e.settleCtx()
	defer cancel()
	if err := e.ledger.Settle(ctx, x.spend.token, 0, x.it.Batch, x.spend.tenant, x.spend.period); err != nil {
		x.log.Warn("could not give back the start's reservation: it lapses by itself, counted as spent", zap.Error(err))
	}
	x.spend.token = ""
}

// settleSpend records what a run cost: its reply's usage at its model's
// price. A run whose request left but whose reply never came (a timeout,
// a lost connection, an interruption) may have been paid: it counts its
// reservation, the most it could cost. It returns the run's spend for
// its result (0: nothing known).
func (e *Executor) settleSpend(x *item, out jobs.Output, runErr error) spend.Amount {
	s := &x.spend
	if e.ledger == nil || !x.kind.Provider || (!s.priced && s.token == "") {
		return 0
	}
	var cost spend.Amount
	switch {
	case out.Usage != nil && s.priced:
		cost = s.price.Of(out.Usage.Input, out.Usage.Output, 1)
	case out.Usage == nil && out.Status == 0 && !out.Sent.IsZero() && runErr != nil:
		cost = s.ceiling
	}
	token := s.token
	if token == "" {
		if cost == 0 {
			return 0
		}
		// No budget binds it: the cost is added all the same, so that what
		// every batch and tenant spent is known.
		token = e.id + ":unreserved"
	}
	ctx, cancel := e.settleCtx()
	defer cancel()
	if err := e.ledger.Settle(ctx, token, cost, x.it.Batch, s.tenant, s.period); err != nil {
		x.log.Warn("could not record the run's spend: a reservation lapses by itself, counted at its most", zap.Error(err))
	}
	s.token = ""
	if cost > 0 {
		e.metrics.Spend.WithLabelValues(s.tenant, x.scope).Add(cost.Float())
	}
	return cost
}

// Why an item went back without a run, for its budget.
var (
	// ErrBudgetHeld: the room left in a budget is held by reservations
	// of starts still running.
	ErrBudgetHeld = errors.New("the budget's room is held by running items")
	// ErrBudgetSpent: the budget cannot cover the start: its batch is
	// paused.
	ErrBudgetSpent = errors.New("the budget cannot cover the start")
	// ErrSpendNotReserved: the reservation could not be made (Redis).
	ErrSpendNotReserved = errors.New("the start's spend could not be reserved")
)
