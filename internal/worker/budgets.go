package worker

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// budgets is the executor's view of what binds a batch's spend
// (executor.Budgets): the batch records the worker watches.
type budgets struct{ w *Worker }

// Binding is batch's tenant and whether it has a budget, from the record
// the watch delivered; a batch the worker has not heard of yet is read
// from the bucket (an item can arrive before its batch's record does).
func (b budgets) Binding(ctx context.Context, batch string) (string, bool, error) {
	v := b.w.batches
	v.mu.Lock()
	rec, ok := v.records[batch]
	v.mu.Unlock()
	if !ok {
		var err error
		rec, err = b.w.q.Batch(ctx, batch)
		if errors.Is(err, queue.ErrNoBatch) {
			return "", false, nil // published by hand, without a record
		}
		if err != nil {
			return "", false, err
		}
	}
	return rec.Tenant, rec.Budget != nil, nil
}

// PauseFor pauses batch for its budget; for its tenant's, every running
// batch of the tenant that the worker knows, so that they stop together.
// It reports whether it paused any (another worker may have first).
func (b budgets) PauseFor(ctx context.Context, batch, reason string) (bool, error) {
	todo := []string{batch}
	if reason == spend.ReasonTenantBudget {
		todo = b.w.batchesOfTenant(batch, kftype.BatchRunning)
	}
	var any bool
	var first error
	for _, id := range todo {
		_, paused, err := b.w.q.PauseFor(ctx, id, reason, b.w.by())
		if err != nil && first == nil {
			first = err
		}
		any = any || paused
	}
	return any, first
}

// by names the worker in the history of a batch it paused or resumed.
func (w *Worker) by() string { return "keyfleet worker " + w.id }

// batchesOfTenant returns batch and the batches in state of its tenant
// that the worker knows (batch alone when it has no tenant).
func (w *Worker) batchesOfTenant(batch string, state kftype.BatchState) []string {
	v := w.batches
	v.mu.Lock()
	defer v.mu.Unlock()
	out := []string{batch}
	tenant := v.records[batch].Tenant
	if tenant == "" {
		return out
	}
	for id, rec := range v.records {
		if id != batch && rec.Tenant == tenant && rec.State == state {
			out = append(out, id)
		}
	}
	return out
}

// tenantResumeEvery spaces a worker's looks at the batches paused for
// their tenant's budget.
const tenantResumeEvery = 5 * time.Second

// resumeTenants resumes the batches paused for their tenant's budget
// once that budget covers a start again: at the next period, or when a
// live budget (producer tenant set, which resumes them itself too) or
// the configuration raised it. Any worker may; the first wins, the
// others find the batch running (queue.ResumeFrom).
func (w *Worker) resumeTenants(ctx context.Context, ledger *spend.Ledger) {
	type paused struct{ id, tenant string }
	var todo []paused
	w.batches.mu.Lock()
	for id, rec := range w.batches.records {
		if rec.State == kftype.BatchPaused && rec.PausedReason == spend.ReasonTenantBudget {
			todo = append(todo, paused{id, rec.Tenant})
		}
	}
	w.batches.mu.Unlock()
	covers := map[string]bool{}
	for _, p := range todo {
		ok, seen := covers[p.tenant]
		if !seen {
			ok = w.tenantCovers(ctx, ledger, p.tenant)
			covers[p.tenant] = ok
		}
		if !ok {
			continue
		}
		if _, err := w.q.ResumeFrom(ctx, p.id, spend.ReasonTenantBudget, w.by()); err == nil {
			w.log.Info("the tenant's budget covers a start again: its batch is resumed", zap.String("batch", p.id),
				zap.String("tenant", p.tenant))
		} else if !errors.Is(err, queue.ErrBatchState) && !errors.Is(err, queue.ErrBatchCancelled) {
			w.log.Warn("could not resume a batch paused for its tenant's budget", zap.String("batch", p.id), zap.Error(err))
		}
	}
}

// tenantCovers reports whether tenant's budget in force (its live one,
// else the configured one) covers its next start in the current period
// (a tenant without a configured budget always does: none binds it).
func (w *Worker) tenantCovers(ctx context.Context, ledger *spend.Ledger, tenant string) bool {
	tb, ok := w.cfg.TenantBudget(tenant)
	if !ok {
		return true
	}
	v, err := ledger.Tenant(ctx, tenant, &tb, time.Now())
	if err != nil {
		w.log.Debug("reading a tenant's spend", zap.String("tenant", tenant), zap.Error(err))
		return false
	}
	return v.Account.Covers()
}

// registerTenants records in the ledger the tenants' budgets the worker's
// configuration sets (spend.Ledger.RegisterTenants): a live budget set
// with `producer tenant set` holds until the configured budget of its
// tenant changes, and then gives way to it.
func (w *Worker) registerTenants(ctx context.Context) error {
	if w.ledger == nil || len(w.cfg.Tenants) == 0 {
		return nil
	}
	configured := make(map[string]*spend.Budget, len(w.cfg.Tenants))
	for name := range w.cfg.Tenants {
		configured[name] = nil
		if b, ok := w.cfg.TenantBudget(name); ok {
			configured[name] = &b
		}
	}
	dropped, err := w.ledger.RegisterTenants(ctx, configured)
	for _, t := range dropped {
		now := "none"
		if b := configured[t]; b != nil {
			now = b.String()
		}
		w.log.Info("the tenant's configured budget changed: its live budget (producer tenant set) gives way to it",
			zap.String("tenant", t), zap.String("budget", now))
	}
	return err
}
