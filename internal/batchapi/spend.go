package batchapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// Spend through the Batch API (docs/batch-api.md, "Spend and budgets"):
// every request's reply is priced at its model's price times
// pool.batch_api_discount; a record's total is settled into the pool's
// spend ledger once, under the record's ID as the token; a record of a
// batch that a budget binds (its own, or its tenant's) reserves the most
// its provider batch can cost under that token before it is created.
//
// What the runner knows of a record's spend lives in a Redis hash beside
// the ledger (spendKey), in the ledger's hash tag:
//
//	state            metaReserving: a reservation was asked for, its
//	                 verdict not known (a crash); metaReserved: it holds
//	tenant, period   the reservation's tenant and tenant-budget period
//	amount           what it reserved
//	settled          what the record's settle added (present: settled)
//
// The ledger's settle is not idempotent by itself: a token with no
// reservation (or a second settle of one, which finds it gone) adds its
// cost every time. The settle and the "settled" field are written in one
// MULTI/EXEC, after a WATCH of the hash finds no "settled": a record's
// cost is added once however often a crash makes a worker collect it
// again.
const (
	metaReserving = "reserving"
	metaReserved  = "reserved"
)

// metaKeep is how long the spend hash outlives the later of now and the
// record's deadline: past any chance of its record being collected again.
const metaKeep = 30 * 24 * time.Hour

// reserveSlack is how long past the record's deadline its reservation
// holds if it is never settled (a fleet down that long): it then lapses,
// counted as spent. By the deadline the provider batch has been
// cancelled, and settled once its provider ended the cancel (minutes).
const reserveSlack = 24 * time.Hour

// binding is what binds a batch's spend, as the runner sees it.
type binding struct {
	// tenant is the batch's ("" none); period and tenantLimit its tenant's
	// configured budget's current period and amount (a tenant without
	// one: the day and NoLimit; no tenant: "").
	tenant, period string
	tenantLimit    spend.Amount
	// bound: a budget binds the batch (its own or its tenant's).
	bound bool
}

func (r *Runner) bindingOf(b kftype.BatchInfo) binding {
	bd := binding{tenant: b.Tenant, tenantLimit: spend.NoLimit, bound: b.Budget != nil}
	if b.Tenant != "" {
		bd.period = spend.PeriodOf(spend.Day, r.now())
	}
	if tb, ok := r.cfg.TenantBudget(b.Tenant); ok && b.Tenant != "" {
		bd.period, bd.tenantLimit, bd.bound = spend.PeriodOf(tb.Period, r.now()), tb.Amount, true
	}
	return bd
}

// discount is the share of the price a Batch API request pays.
func (r *Runner) discount() float64 {
	d := r.cfg.Pool.BatchAPIDiscount
	if !(d > 0 && d <= 1) {
		d = config.BatchAPIDiscountDefault
	}
	return d
}

// lineCost is what a result line's request cost: its reply's usage at
// price times the discount (0 when the reply says no usage).
func (r *Runner) lineCost(l *line, price spend.Price) spend.Amount {
	if l == nil || len(l.Body) == 0 {
		return 0
	}
	u, ok := provider.ReadUsage(l.Body)
	if !ok {
		return 0
	}
	return price.Of(u.Input, u.Output, r.discount())
}

// spendMeta is a record's spend hash, as read.
type spendMeta struct {
	state, tenant, period string
	amount                spend.Amount
	settled               bool
}

func (r *Runner) readMeta(ctx context.Context, id string) (spendMeta, error) {
	h, err := r.o.Redis.HGetAll(ctx, spendKey(r.cfg.Pool.Name, id)).Result()
	if err != nil {
		return spendMeta{}, fmt.Errorf("batchapi: read the spend of record %s: %w", id, err)
	}
	n, _ := strconv.ParseInt(h["amount"], 10, 64)
	_, settled := h["settled"]
	return spendMeta{state: h["state"], tenant: h["tenant"], period: h["period"], amount: spend.Amount(n), settled: settled}, nil
}

// writeMeta sets fields of a record's spend hash and how long it lives.
func (r *Runner) writeMeta(ctx context.Context, p queue.ProviderBatch, fields ...any) error {
	key := spendKey(r.cfg.Pool.Name, p.ID)
	_, err := r.o.Redis.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, fields...)
		pipe.ExpireAt(ctx, key, r.metaUntil(p))
		return nil
	})
	if err != nil {
		return fmt.Errorf("batchapi: record the spend of record %s: %w", p.ID, err)
	}
	return nil
}

func (r *Runner) metaUntil(p queue.ProviderBatch) time.Time {
	until := time.Now()
	if p.Deadline.After(until) {
		until = p.Deadline
	}
	return until.Add(metaKeep)
}

// budget reserves, for a record of batch b that a budget binds, the most
// its provider batch can cost (each request's input counted a token per
// byte, its max output tokens, at the model's price, times the
// discount), under the record's ID, before it is created. It reports
// whether the record may be created now: not while the budget's room is
// held by reservations (tried again after budgetWait), nor when the
// budget cannot cover it: then it is cut to the requests the budget
// covers (split.go), or, when not even its first one fits, the batch (for
// a tenant's budget every running batch of the tenant) is paused with the
// reason. A record whose
// model has no price, or with a request that names no max_tokens, cannot
// be reserved for: it goes to real time, where each item is judged on its
// own (and such items are dead-lettered, naming what is missing). A
// reservation an earlier attempt made holds until the record settles.
func (r *Runner) budget(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, b kftype.BatchInfo) (bool, error) {
	bd := r.bindingOf(b)
	if !bd.bound {
		return true, nil
	}
	m, err := r.readMeta(ctx, p.ID)
	if err != nil || m.state == metaReserved {
		return err == nil, err
	}
	price, priced := spend.Prices(r.cfg.Pool.Prices).Lookup(p.Scope)
	if !priced {
		return false, r.cannotReserve(ctx, store, p, fmt.Sprintf("model %q has no price (pool.prices)", p.Scope))
	}
	need, given, err := r.ceiling(ctx, store, *p, price)
	if err != nil {
		return false, err
	}
	if !given {
		return false, r.cannotReserve(ctx, store, p, "a request sets no max_tokens (or max_completion_tokens)")
	}
	if m.state == metaReserving {
		// An attempt died between asking and hearing: whatever it took is
		// given back (nothing was created under it).
		if err := r.ledger.Settle(ctx, p.ID, 0, p.Batch, m.tenant, m.period); err != nil {
			return false, err
		}
	}
	if err := r.writeMeta(ctx, *p, "state", metaReserving, "tenant", bd.tenant, "period", bd.period, "amount", int64(need)); err != nil {
		return false, err
	}
	deadline := r.now()
	for _, d := range []time.Time{p.Deadline, b.Deadline} {
		if d.After(deadline) {
			deadline = d
		}
	}
	v, err := r.ledger.Reserve(ctx, spend.Reservation{Token: p.ID, Amount: need, Batch: p.Batch,
		Tenant: bd.tenant, Period: bd.period, TenantBudget: bd.tenantLimit, At: r.now(), Expires: deadline.Add(reserveSlack)})
	if err != nil {
		return false, err // the hash says reserving: the next attempt gives it back first
	}
	if v.OK {
		// The tenant's period the ledger counted it in: its live budget's
		// (producer tenant set) may be of another kind than the configured.
		if err := r.writeMeta(ctx, *p, "state", metaReserved, "period", v.Period); err != nil {
			return false, err
		}
		if r.crashed("reserved") {
			return false, errCrash
		}
		r.log.Info("the provider batch's most spend is reserved", zap.String("batch", p.Batch), zap.String("record", p.ID),
			zap.String("tenant", bd.tenant), zap.Stringer("reserved", need))
		return true, nil
	}
	if err := r.o.Redis.Del(ctx, spendKey(r.cfg.Pool.Name, p.ID)).Err(); err != nil {
		return false, fmt.Errorf("batchapi: record the spend of record %s: %w", p.ID, err)
	}
	if v.Wait {
		r.log.Debug("the budget's room is held by running items: the provider batch waits", zap.String("record", p.ID),
			zap.String("budget", v.Exhausted), zap.Stringer("left", v.Left), zap.Stringer("need", need))
		r.later(r.cl.recKey(p.ID), min(r.poll, budgetWait))
		return false, nil
	}
	switch k, err := r.fit(ctx, store, *p, b, bd, price); {
	case err != nil:
		return false, err
	case k >= p.Items: // the room grew meanwhile
		r.later(r.cl.recKey(p.ID), min(r.poll, budgetWait))
		return false, nil
	case k > 0:
		r.log.Info("the budget cannot cover the provider batch but covers part of it: it is cut", zap.String("batch", p.Batch),
			zap.String("record", p.ID), zap.String("budget", v.Exhausted), zap.Int("items", p.Items), zap.Int("covered", k))
		return false, r.split(ctx, store, p, k)
	}
	paused, err := r.pauseFor(ctx, b, v.Exhausted)
	if err != nil {
		return false, err
	}
	if paused {
		r.log.Info("the budget cannot cover the provider batch: the batch is paused", zap.String("batch", p.Batch),
			zap.String("record", p.ID), zap.String("budget", v.Exhausted), zap.String("tenant", bd.tenant),
			zap.Stringer("left", v.Left), zap.Stringer("need", need))
	}
	return false, nil
}

// budgetWait is how long a record waits when the budget's room is held
// by reservations (at most the poll interval).
const budgetWait = 5 * time.Second

// cannotReserve sends a record that no reservation can be made for to
// real time.
func (r *Runner) cannotReserve(ctx context.Context, store *queue.ProviderBatchStore, p *queue.ProviderBatch, why string) error {
	r.log.Warn("a provider batch under a budget cannot reserve its spend: its items run in real time, where each is judged on its own",
		zap.String("batch", p.Batch), zap.String("record", p.ID), zap.String("why", why))
	p.State, p.Error = queue.PBFallback, "under a budget: "+why
	if err := r.update(ctx, store, p); err != nil {
		return err
	}
	return r.finish(ctx, store, p, nil)
}

// ceiling is the most a record's requests can cost through the Batch
// API, and whether every request names its max output (read from its
// input once, then remembered by the input's name: a record cut to fit a
// budget has a new input).
func (r *Runner) ceiling(ctx context.Context, store *queue.ProviderBatchStore, p queue.ProviderBatch, price spend.Price) (spend.Amount, bool, error) {
	r.mu.Lock()
	c, ok := r.ceilings[p.Input]
	r.mu.Unlock()
	if ok {
		return c.amount, c.given, nil
	}
	in, err := store.Object(ctx, p.Input)
	if err != nil {
		return 0, false, err
	}
	defer in.Close()
	var sum spend.Amount
	given, n := true, 0
	err = readLines(in, func(l []byte) error {
		req, err := requestOf(p.Provider, l)
		if err != nil {
			return fmt.Errorf("input of %s, line %d: %w", p.ID, n+1, err)
		}
		i, o, g := provider.Ceiling(req, p.Endpoint)
		sum += price.Ceiling(i, o)
		given = given && g
		n++
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	c = ceilingOf{amount: spend.Amount(math.Ceil(float64(sum) * r.discount())), given: given}
	r.mu.Lock()
	r.ceilings[p.Input] = c
	r.mu.Unlock()
	return c.amount, c.given, nil
}

// ceilingOf is a record's ceiling, as ceiling found it.
type ceilingOf struct {
	amount spend.Amount
	given  bool
}

// pauseFor pauses batch b for reason; for its tenant's budget, every
// running batch of the tenant. It reports whether it paused any
// (another worker may have first).
func (r *Runner) pauseFor(ctx context.Context, b kftype.BatchInfo, reason string) (bool, error) {
	todo := []string{b.ID}
	if reason == spend.ReasonTenantBudget && b.Tenant != "" {
		all, err := r.q.Batches(ctx)
		if err != nil {
			return false, err
		}
		for _, o := range all {
			if o.ID != b.ID && o.Tenant == b.Tenant && o.State == kftype.BatchRunning {
				todo = append(todo, o.ID)
			}
		}
	}
	some := false
	var errs []error
	for _, id := range todo {
		_, paused, err := r.q.PauseFor(ctx, id, reason, "keyfleet worker "+r.o.Owner)
		errs = append(errs, err)
		some = some || paused
	}
	return some, errors.Join(errs...)
}

// settle adds what a record's requests cost (actual) to the ledger once:
// the record's reservation, if it made one, gives way to it. It reports
// whether this call settled it (false: there was nothing to settle, or
// an earlier collection did).
func (r *Runner) settle(ctx context.Context, p queue.ProviderBatch, b kftype.BatchInfo, actual spend.Amount) (bool, error) {
	m, err := r.readMeta(ctx, p.ID)
	if err != nil || m.settled {
		return false, err
	}
	tenant, period := m.tenant, m.period
	if m.state == "" {
		if actual == 0 {
			return false, nil // nothing reserved, nothing spent
		}
		bd := r.bindingOf(b)
		tenant, period = bd.tenant, bd.period
	}
	// In the transaction the ledger's script goes as EVALSHA: loaded
	// first (a read changes nothing).
	if _, _, err := r.ledger.Read(ctx, "", "", ""); err != nil {
		return false, err
	}
	key := spendKey(r.cfg.Pool.Name, p.ID)
	settled := false
	err = r.o.Redis.Watch(ctx, func(tx *redis.Tx) error {
		done, err := tx.HExists(ctx, key, "settled").Result()
		if err != nil || done {
			return err
		}
		var mark *redis.IntCmd
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			_ = spend.NewLedger(pipe, r.cfg.Pool.Name).Settle(ctx, p.ID, actual, p.Batch, tenant, period)
			mark = pipe.HSet(ctx, key, "settled", int64(actual))
			pipe.ExpireAt(ctx, key, r.metaUntil(p))
			return nil
		})
		if err != nil && !errors.Is(err, redis.TxFailedErr) && mark != nil && mark.Err() == nil {
			// The settle failed inside EXEC (its script gone from the
			// cache meanwhile) while the mark was written: unmarked.
			if uerr := r.o.Redis.HDel(context.WithoutCancel(ctx), key, "settled").Err(); uerr != nil {
				r.log.Error("a settle that failed is marked done: the record's spend is not in the ledger", zap.String("record", p.ID), r.errField(uerr))
			}
		}
		settled = err == nil
		return err
	}, key)
	if err != nil {
		return false, fmt.Errorf("batchapi: settle the spend of record %s: %w", p.ID, err)
	}
	if settled && actual > 0 && r.o.Metrics != nil {
		r.o.Metrics.Spend.WithLabelValues(tenant, p.Scope).Add(actual.Float())
	}
	return settled, nil
}
