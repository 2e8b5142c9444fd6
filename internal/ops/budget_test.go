package ops_test

import (
	"errors"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/ops"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// A batch set --budget: in the record and the ledger; a batch paused for
// its budget runs again; an unknown batch is not found, a cancelled one a
// conflict, an amount not above 0 invalid.
func TestSetBudget(t *testing.T) {
	f := newFleet(t)
	rs := redistest.Start(t)
	l := spend.NewLedger(rs.Client(t), redistest.UniqueName(t))
	f.enqueue("capped", 2)
	if _, _, err := f.q.PauseFor(f.ctx, "capped", spend.ReasonBudget, "worker-1"); err != nil {
		t.Fatal(err)
	}
	forty, _ := spend.ParseAmount("40")
	set, err := ops.SetBudget(f.ctx, f.q, l, "capped", forty, "alice@host")
	if err != nil || !set.Resumed || set.Batch.State != kftype.BatchRunning || set.Batch.Budget == nil || *set.Batch.Budget != forty ||
		set.Account.Budget != forty {
		t.Fatalf("set a budget of 40: want it resumed with the budget, got %+v %v", set, err)
	}

	f.enqueue("gone", 1)
	if _, err := ops.Steer(f.ctx, f.q, "gone", kftype.ActionCancel, "alice@host"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, batch string
		amount      spend.Amount
		class       error
	}{
		{"unknown batch", "nope", forty, ops.ErrNotFound},
		{"cancelled batch", "gone", forty, ops.ErrConflict},
		{"zero", "capped", 0, ops.ErrInvalid},
		{"bad ID", "", forty, ops.ErrInvalid},
	} {
		if _, err := ops.SetBudget(f.ctx, f.q, l, c.batch, c.amount, "alice@host"); !errors.Is(err, c.class) {
			t.Errorf("%s: want %v, got %v", c.name, c.class, err)
		}
	}
	rs.Stop()
	if _, err := ops.SetBudget(f.ctx, f.q, l, "capped", forty, "alice@host"); !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("Redis stopped: want ErrUnavailable, got %v", err)
	}
}
