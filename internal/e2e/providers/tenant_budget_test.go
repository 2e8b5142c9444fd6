package providers

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// tenantRow is a tenant of `producer tenant list --json` (and of `tenant
// set --json`, with resumed).
type tenantRow struct {
	Name    string       `json:"name"`
	Budget  *float64     `json:"budget"`
	Period  string       `json:"period"`
	Source  string       `json:"budget_source"`
	Spent   spend.Amount `json:"spent"`
	Resumed []string     `json:"resumed"`
}

// tenantList is `producer tenant list --json`, by name.
func tenantList(f *e2etest.Fleet) map[string]tenantRow {
	f.T.Helper()
	r := f.Producer(nil, "tenant", "list", "--json")
	var rows []tenantRow
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rows) != nil {
		f.T.Fatalf("tenant list --json:\n%s", r)
	}
	out := map[string]tenantRow{}
	for _, t := range rows {
		out[t.Name] = t
	}
	return out
}

// A tenant's budget changed live (docs/operations.md, "Spend, budgets and
// tenants"), through the binaries against the strict OpenAI stand-in, the
// workers never restarted: the batch paused for the configured budget of
// its tenant resumes at once when `producer tenant set` raises it, and
// finishes; a live budget lowered below what was spent pauses the
// tenant's next batch at its workers' next start, without overspending
// it; none brings the configured budget back.
func TestTenantBudgetChangedLive(t *testing.T) {
	f, api := spendFleet(t, 4, ratelimit.Limit{}, "research: {weight: 1, budget: 0.002/d}\nsupport: {weight: 1}", 8)
	workers := []*e2etest.Process{f.StartWorker("w1"), f.StartWorker("w2")}
	path := f.WriteInput("r1.jsonl", chatLines(30, "gpt-4o", "r1"))
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "r1", "--tenant", "research", path); r.Code != 0 {
		t.Fatalf("enqueue r1:\n%s", r)
	}
	testutil.WaitFor(t, "r1 paused for its tenant's configured budget", time.Minute, func() bool {
		return batchJSON(f, "r1")["paused_reason"] == "tenant-budget"
	})
	if b := batchJSON(f, "r1"); b["done"].(float64) >= 30 {
		t.Fatalf("r1 finished under a budget of 0.002: %v", b)
	}

	// Raised live: resumed by the command, finished by the same workers.
	r := f.Producer(nil, "tenant", "set", "research", "--budget", "100/d", "--json")
	var set tenantRow
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &set) != nil || set.Source != "live" || set.Budget == nil || *set.Budget != 100 ||
		!slices.Equal(set.Resumed, []string{"r1"}) {
		t.Fatalf("tenant set research --budget 100/d: want r1 resumed:\n%s", r)
	}
	for id, o := range f.WaitResults("r1", 30, time.Minute) {
		if o.Outcome != "succeeded" {
			t.Errorf("r1's %s: %s %q", id, o.Outcome, o.Error)
		}
	}
	if b := batchJSON(f, "r1"); b["state"] != "done" {
		t.Errorf("r1 after the raise: %v, want done", b)
	}

	// Lowered live below what it spent, plus a little: the next batch
	// pauses at the workers' next start, and the budget holds.
	testutil.WaitFor(t, "the running items to finish", 30*time.Second, func() bool {
		before := spentAtAPI(api)
		time.Sleep(200 * time.Millisecond)
		return spentAtAPI(api) == before
	})
	spent := tenantList(f)["research"].Spent
	limit := spent + spend.Unit/1000
	if r := f.Producer(nil, "tenant", "set", "research", "--budget", limit.String()+"/d"); r.Code != 0 {
		t.Fatalf("tenant set research --budget %s/d:\n%s", limit, r)
	}
	path = f.WriteInput("r2.jsonl", chatLines(200, "gpt-4o", "r2"))
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--batch", "r2", "--tenant", "research", path); r.Code != 0 {
		t.Fatalf("enqueue r2:\n%s", r)
	}
	testutil.WaitFor(t, "r2 paused for the tenant's live budget", time.Minute, func() bool {
		return batchJSON(f, "r2")["paused_reason"] == "tenant-budget"
	})
	testutil.WaitFor(t, "the running items to finish", 30*time.Second, func() bool {
		before := spentAtAPI(api)
		time.Sleep(200 * time.Millisecond)
		return spentAtAPI(api) == before
	})
	if atAPI := spentAtAPI(api); atAPI > limit {
		t.Fatalf("research overspent its live budget: the API's usage costs %s, the budget is %s", atAPI, limit)
	}
	if row := tenantList(f)["research"]; row.Source != "live" || row.Spent > limit {
		t.Errorf("tenant list after the lowered budget: %+v (limit %s)", row, limit)
	}

	// none: the configured 0.002/d again, which covers nothing more.
	r = f.Producer(nil, "tenant", "set", "research", "--budget", "none", "--json")
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &set) != nil || set.Source != "config" || len(set.Resumed) != 0 {
		t.Fatalf("tenant set research --budget none: want the configured budget, nothing resumed:\n%s", r)
	}
	for _, w := range workers {
		select {
		case <-w.Done():
			t.Errorf("worker %s exited:\n%s", w.Name(), e2etest.Tail(w.Log.String(), 20))
		default:
		}
	}
	f.AssertNoSecretsInLogs()
}
