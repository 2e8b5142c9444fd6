package enqueue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// A budget and a tenant are the batch's: in its record, the budget in the
// spend ledger; under a budget every request names its max tokens; a
// batch keeps its tenant.
func TestEnqueueBudgetAndTenant(t *testing.T) {
	q, _ := open(t)
	ledger := spend.NewLedger(redistest.Start(t).Client(t), "enq")
	budget := spend.Amount(5 * spend.Unit)
	good := `{"id":"a","model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":10}` + "\n"
	req := func(path string) enqueue.Request {
		return enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "chat", NamedKinds: []string{"chat"}, Batch: "paid",
			Provider: "openai", Budget: &budget, Ledger: ledger, Tenant: "research", Tenants: []string{"research", "support"}}
	}
	rep, err := enqueue.Run(ctx(t), q, req(writeFile(t, "good.jsonl", good)))
	if err != nil || rep.New != 1 {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	rec, err := q.Batch(ctx(t), "paid")
	if err != nil || rec.Tenant != "research" || rec.Budget == nil || *rec.Budget != budget {
		t.Fatalf("record %+v %v: want tenant research, budget 5", rec, err)
	}
	if b, _, err := ledger.Read(ctx(t), "paid", "", ""); err != nil || b.Budget != budget {
		t.Fatalf("ledger %+v %v: want the budget", b, err)
	}

	noMax := writeFile(t, "nomax.jsonl", `{"id":"b","model":"gpt-4o-mini","messages":[]}`+"\n")
	r := req(noMax)
	r.Batch = "paid-2"
	for _, dry := range []bool{true, false} {
		r.DryRun = dry
		if _, err := enqueue.Run(ctx(t), q, r); !errors.Is(err, enqueue.ErrInput) || !strings.Contains(err.Error(), "line 1") ||
			!strings.Contains(err.Error(), "max_tokens") {
			t.Errorf("a request without max_tokens under a budget (dry run %v): %v", dry, err)
		}
	}

	// A tenant's budget binds its batches as their own would.
	r = req(noMax)
	r.Batch, r.Budget, r.BudgetedTenants = "tenant-paid", nil, []string{"research"}
	if _, err := enqueue.Run(ctx(t), q, r); !errors.Is(err, enqueue.ErrInput) || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("a request without max_tokens of a tenant with a budget: %v", err)
	}
	r.BudgetedTenants = []string{"support"}
	if rep, err := enqueue.Run(ctx(t), q, r); err != nil || rep.New != 1 {
		t.Errorf("a request without max_tokens, no budget binding it: %+v %v", rep, err)
	}

	other := req(writeFile(t, "more.jsonl", `{"id":"c","model":"gpt-4o-mini","messages":[],"max_tokens":1}`+"\n"))
	other.Tenant = "support"
	if _, err := enqueue.Run(ctx(t), q, other); !errors.Is(err, enqueue.ErrInvalid) || !strings.Contains(err.Error(), `belongs to tenant "research"`) {
		t.Errorf("another tenant for the batch: %v", err)
	}
	for _, tc := range []struct {
		edit func(*enqueue.Request)
		want string
	}{
		{func(r *enqueue.Request) { r.Tenant = "marketing" }, `"marketing" is not a tenant of the configuration`},
		{func(r *enqueue.Request) { r.Provider = "" }, "needs a kind with a provider"},
		{func(r *enqueue.Request) { zero := spend.Amount(0); r.Budget = &zero }, "must be more than 0"},
	} {
		r := req("x")
		tc.edit(&r)
		if err := enqueue.Check(r); !errors.Is(err, enqueue.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want %q", err, tc.want)
		}
	}
}
