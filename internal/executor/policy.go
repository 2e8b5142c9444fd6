package executor

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// Policy is what the executor needs of the configuration, read once.
type Policy struct {
	// MaxAttempts is worker.max_attempts: failed runs (transient, timed
	// out, or never reported) before the item is dead-lettered.
	MaxAttempts int
	// MaxRateLimited is worker.max_rate_limited: rate-limited runs in a
	// row before the item is dead-lettered (<= 0: no bound).
	MaxRateLimited int
	// RetryDelay is the wait before the next run after `failures` failed
	// runs (worker.retry_backoff).
	RetryDelay func(failures int) time.Duration
	// Cooldown is pool.cooldown: the longest rest after bare 429s.
	Cooldown time.Duration
	// MaxRest is pool.max_rest: no rest a reply asks for is longer.
	MaxRest time.Duration
	// AckWait is the consumer's ack wait: the message is kept alive well
	// within it, and settling is bounded by it (at least 5s).
	AckWait time.Duration
	// MaxDeliver is the consumer's max_deliver (<= 0: unlimited).
	MaxDeliver int
	// LeaseTTL is the pool's lease TTL: the lease is renewed well within it.
	LeaseTTL time.Duration
	// CostField and CostDefault are pool.cost: where an item's estimated
	// cost is, and the cost of an item without it.
	CostField   string
	CostDefault int64
	// ScopeField is pool.scope.field: an item's scope, read from its
	// payload when it was published without one ("" none).
	ScopeField string
	// Prices are pool.prices; TenantBudgets the configured tenants'
	// budgets, by tenant (tenants without one are not in it).
	Prices        spend.Prices
	TenantBudgets map[string]spend.Budget
}

// reservationTTL is how long a start's spend reservation lives if it
// never settles (its worker died): then it lapses, counted as spent.
// Twice the longest the run may take or its lease may go unrenewed, and
// a minute more: a run still going is never taken for a dead one.
func (p Policy) reservationTTL(k Kind) time.Duration {
	return 2*max(k.Timeout, p.LeaseTTL) + time.Minute
}

// PolicyFrom reads the policy from the worker's configuration, its
// queue's (with defaults) and the pool's lease TTL.
func PolicyFrom(cfg *config.Config, q queue.Config, leaseTTL time.Duration) Policy {
	return Policy{
		MaxAttempts:    cfg.Worker.MaxAttempts,
		MaxRateLimited: cfg.Worker.MaxRateLimited,
		RetryDelay:     cfg.Worker.RetryDelay,
		Cooldown:       cfg.Pool.Cooldown,
		MaxRest:        cfg.Pool.MaxRest,
		AckWait:        q.AckWait,
		MaxDeliver:     q.MaxDeliver,
		LeaseTTL:       leaseTTL,
		CostField:      cfg.Pool.Cost.Field,
		CostDefault:    cfg.Pool.Cost.Default,
		ScopeField:     cfg.Pool.Scope.Field,
		Prices:         spend.Prices(cfg.Pool.Prices),
		TenantBudgets:  tenantBudgets(cfg),
	}
}

// tenantBudgets are the configured tenants' budgets.
func tenantBudgets(cfg *config.Config) map[string]spend.Budget {
	out := map[string]spend.Budget{}
	for name := range cfg.Tenants {
		if b, ok := cfg.TenantBudget(name); ok {
			out[name] = b
		}
	}
	return out
}

// settleTimeout bounds the I/O that settles an item.
func (p Policy) settleTimeout() time.Duration { return max(p.AckWait, 5*time.Second) }
