package gateway

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// Ledger is the fleet-wide spend ledger (*spend.Ledger), as the
// executor uses it for batch items.
type Ledger interface {
	Reserve(ctx context.Context, r spend.Reservation) (spend.Verdict, error)
	Settle(ctx context.Context, token string, actual spend.Amount, batch, tenant, period string) error
}

// ledgerBatch is the batch a gateway request counts in, in the ledger:
// none (no batch has the empty ID). Its spend counts in its tenant's.
const ledgerBatch = ""

// spending is what a request has to do with spend: its model's price,
// its tenant's budget period, and the reservation it holds.
type spending struct {
	price          spend.Price
	priced         bool
	tenant, period string
	model          string
	token          string       // the reservation ("" none)
	ceiling        spend.Amount // what it reserved: the most the request can cost
}

// reserve takes what the request can cost at most from its tenant's
// budget, before it waits for a key, as a batch item's start does: its
// input counted high and its max output tokens at its model's price. A
// tenant without a budget reserves nothing. The answer, when it cannot
// start: a 400 (no price, no bound on its output), a 429 naming the
// budget (spent, or held by requests running), a 503 (Redis).
func (g *Gateway) reserve(ctx context.Context, rq *request) *apiError {
	s := &rq.spend
	s.tenant, s.model = rq.tenant, rq.scope
	s.price, s.priced = g.prices.Lookup(rq.scope)
	b, bound := g.budgets[rq.tenant]
	now := time.Now()
	if rq.tenant != "" {
		// The period its spend counts in: its budget's, else the day (as
		// status reads a tenant without a budget).
		s.period = spend.PeriodOf(cmp.Or(b.Period, spend.Day), now)
	}
	if g.ledger == nil || !bound {
		return nil
	}
	if !s.priced {
		return badRequest(fmt.Sprintf("model %q has no price (pool.prices): tenant %s has a budget, and a request of it cannot start without its model's price",
			rq.scope, rq.tenant))
	}
	in, out, given := provider.Ceiling(rq.body, rq.route.endpoint)
	if !given {
		return badRequest(fmt.Sprintf("the request sets no max_tokens (or max_completion_tokens, max_output_tokens): tenant %s has a budget, "+
			"and a request of it cannot start without a bound on its output", rq.tenant))
	}
	s.ceiling = s.price.Ceiling(in, out)
	token := g.id + ":gw:" + strconv.FormatUint(g.seq.Add(1), 10)
	v, err := g.ledger.Reserve(ctx, spend.Reservation{
		Token: token, Amount: s.ceiling, Batch: ledgerBatch, Tenant: rq.tenant, Period: s.period, TenantBudget: b.Amount,
		At: now, Expires: now.Add(g.reservationTTL(rq)),
	})
	switch {
	case err != nil:
		g.log.Warn("cannot reserve a gateway request's spend in Redis", zap.Error(err))
		return unavailable("the gateway cannot reach its spend ledger; try again")
	case v.OK:
		s.token = token
		if v.Period != "" {
			s.period = v.Period // a live budget of another kind than the configured one
		}
		return nil
	case v.Wait:
		return rateLimited(fmt.Sprintf("tenant %s's budget (%s) has %s left, held by its requests and batches running; this request may cost up to %s",
			rq.tenant, b, v.Left, s.ceiling), time.Second)
	}
	e := rateLimited(fmt.Sprintf("tenant %s's budget (%s) is spent for %s: %s left, and this request may cost up to %s",
		rq.tenant, b, s.period, v.Left, s.ceiling), time.Until(spend.PeriodEnd(b.Period, now)))
	e.openaiType, e.openaiCode, e.noRetry = "insufficient_quota", "insufficient_quota", true
	return e
}

// reservationTTL is how long a request's reservation lives if its worker
// dies before it settles: then it lapses, counted as spent. Its wait for
// a key, the API's time to answer twice, and ten minutes of streaming.
func (g *Gateway) reservationTTL(rq *request) time.Duration {
	return g.maxWait + 2*rq.route.kind.Timeout + 10*time.Minute
}

// settleSpend records what the request cost: its reply's usage at its
// model's price. A request that may have been paid without a usage in
// its reply (paid: a 2xx without usage, as a stream without
// stream_options.include_usage; a reply cut short; a connection lost
// after the request left) counts its reservation, the most it could
// cost, when it made one (a budget is never overspent); without one, its
// cost is unknown and nothing is added. A refused request costs nothing.
func (g *Gateway) settleSpend(rq *request, paid bool) spend.Amount {
	s := &rq.spend
	if g.ledger == nil || (!s.priced && s.token == "") {
		return 0
	}
	var cost spend.Amount
	switch {
	case rq.usage != nil && s.priced:
		cost = s.price.Of(rq.usage.Input, rq.usage.Output, 1)
	case rq.usage == nil && paid:
		cost = s.ceiling
	}
	token := s.token
	if token == "" {
		if cost == 0 {
			return 0
		}
		token = g.id + ":gw:unreserved" // no budget binds it: added all the same
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := g.ledger.Settle(ctx, token, cost, ledgerBatch, s.tenant, s.period); err != nil {
		g.log.Warn("could not record a gateway request's spend: its reservation lapses by itself, counted at its most", zap.Error(err))
	}
	s.token = ""
	if cost > 0 && g.spendMetric != nil {
		g.spendMetric.WithLabelValues(s.tenant, s.model).Add(cost.Float())
	}
	return cost
}
