package batchapi_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// A budget that covers 2 of a provider batch's 5 requests (their most
// spend, at half price) does not pause the batch: the record is cut, its
// first 2 requests are created as a provider batch and the 3 others wait
// in a record of their own, created once there is room again (cut again:
// the 2 cost less than their most spend, which leaves room for one
// more); when not even one request fits, the batch is paused.
// Whatever the budget is (the batch's or its tenant's) and wherever a
// worker dies while cutting: no item is in two records or in none, each
// record's provider batch is created once, every item of a done record
// has its result, and the budget is never overspent.
func TestBudgetCutsProviderBatch(t *testing.T) {
	for _, prov := range providers {
		for _, budget := range []string{"batch", "tenant"} {
			for _, point := range []string{"", "split", "split-rest"} {
				t.Run(prov+"/"+budget+"/"+point, func(t *testing.T) {
					e := newEnv(t, prov)
					l := e.priced()
					const n = 5
					// Replies of max_tokens: each costs half its most spend or
					// more, so the budget of 2 covers 3 requests, not 5.
					lines := e.boundedItems(n, func(i int) string { return fmt.Sprintf("question %d [fake:output_tokens=20]", i) })
					mod := withBudget(l, spend.Unit)
					reason := spend.ReasonBudget
					if budget == "tenant" {
						mod = func(r *enqueue.Request) { r.Tenant = "research" }
						reason = spend.ReasonTenantBudget
					}
					e.enqueueWith("cut", lines, e.clock.now().Add(24*time.Hour), mod)
					prefix := e.prefixCeilings("cut") // equal requests: prefix[k] is k's
					const cover = 2
					limit := prefix[cover]
					if budget == "batch" {
						if _, err := l.SetBatchBudget(ctx(t), "cut", limit); err != nil {
							t.Fatal(err)
						}
					} else {
						e.cfg.Tenants = map[string]config.Tenant{"research": {Weight: 1, Budget: limit.String() + "/d"}}
					}
					r := e.runner(nil)
					var crashed atomic.Bool
					batchapi.SetCrash(r, func(p string) bool { return p == point && crashed.CompareAndSwap(false, true) })
					deadline := time.Now().Add(30 * time.Second)
					for !e.settledUnder("cut") {
						if time.Now().After(deadline) {
							t.Fatalf("timed out: %+v, batch %+v", e.records("cut"), e.batchState("cut"))
						}
						if err := e.step(r); errors.Is(err, batchapi.ErrCrash) {
							r = e.runner(nil)
						}
						time.Sleep(20 * time.Millisecond)
					}
					if point != "" && !crashed.Load() {
						t.Fatalf("never reached %s", point)
					}
					ps := e.records("cut") // oldest first
					if len(ps) < 2 || point == "" && ps[0].Items != cover {
						// After a crash the rest may go first, the first part then
						// cut again: the other checks hold all the same.
						t.Fatalf("records %+v: want the first cut to %d requests, the rest apart", ps, cover)
					}
					seen, done := 0, 0
					slices.SortFunc(ps, func(a, b queue.ProviderBatch) int { return int(a.FirstSeq) - int(b.FirstSeq) })
					for i, p := range ps {
						seen += p.Items
						if i > 0 && p.FirstSeq <= ps[i-1].LastSeq {
							t.Errorf("records %s and %s share staged messages: %+v", ps[i-1].ID, p.ID, ps)
						}
						if p.Split != nil {
							t.Errorf("record %s's cut never ended: %+v", p.ID, p)
						}
						if p.State == queue.PBDone {
							done += p.Items
						}
						if p.Items > cover && p.State != queue.PBStaged {
							t.Errorf("record %s holds %d items, more than the budget covers", p.ID, p.Items)
						}
					}
					if seen != n {
						t.Errorf("the records hold %d items, want %d", seen, n)
					}
					res := e.results("cut")
					if len(res) != done {
						t.Errorf("%d results, want %d (the items of done records)", len(res), done)
					}
					for id, r := range res {
						if r.Outcome != kftype.OutcomeSucceeded || r.Via == "" {
							t.Errorf("%s: %+v", id, r)
						}
					}
					if c, want := e.created(), int64(countState(ps, queue.PBDone)); c != want {
						t.Errorf("%d provider batches created, want %d (one per done record)", c, want)
					}
					a := e.account(l, "cut", budget == "tenant")
					if a.Spent > limit || a.Reserved != 0 {
						t.Errorf("the ledger: %+v; want at most %v spent, nothing reserved", a, limit)
					}
					if done == n {
						t.Errorf("every item done under a budget of %d requests' most spend (each costs half of it or more): %+v", cover, ps)
					}
					if done < n {
						if b := e.batchState("cut"); b.State != kftype.BatchPaused || b.PausedReason != reason {
							t.Errorf("items wait while the batch is %s (%s), want paused (%s)", b.State, b.PausedReason, reason)
						}
						if left := limit - a.Spent; left >= prefix[1] {
							t.Errorf("paused with %v left, which covers a request (%v)", left, prefix[1])
						}
					}
				})
			}
		}
	}
}

// prefixCeilings are the most the first k of batch's staged requests can
// cost through the Batch API, k = 0..n: each request's input a token per
// byte and its max_tokens, at the model's price, half off (rounded up),
// as a budget reserves it.
func (e *env) prefixCeilings(batch string) []spend.Amount {
	e.t.Helper()
	subjects, err := e.q.StagedSubjects(ctx(e.t), batch)
	if err != nil || len(subjects) != 1 {
		e.t.Fatalf("staged subjects %v %v, want one", subjects, err)
	}
	spec, _ := provider.Lookup(e.prov)
	price := prices[e.model()]
	out := []spend.Amount{0}
	var sum spend.Amount
	for subj := range subjects {
		for seq := uint64(1); ; {
			m, err := e.q.NextStaged(ctx(e.t), subj, seq)
			if err != nil {
				e.t.Fatal(err)
			}
			if m == nil {
				break
			}
			in, o, given := provider.Ceiling(m.Item.Payload, spec.Endpoint)
			if !given {
				e.t.Fatalf("item %s names no max_tokens", m.Item.ID)
			}
			sum += price.Ceiling(in, o)
			out = append(out, spend.Amount(math.Ceil(float64(sum)*0.5)))
			seq = m.Seq + 1
		}
	}
	return out
}

// settledUnder reports whether batch's records are all done, or those
// not done all staged in a batch paused.
func (e *env) settledUnder(batch string) bool {
	ps := e.records(batch)
	if len(ps) == 0 {
		return false
	}
	paused := e.batchState(batch).State == kftype.BatchPaused
	for _, p := range ps {
		if p.Active() && (p.State != queue.PBStaged || !paused || p.Split != nil) {
			return false
		}
	}
	return true
}

// account is the ledger's account of batch, or of its tenant research
// this period.
func (e *env) account(l *spend.Ledger, batch string, tenant bool) spend.Account {
	e.t.Helper()
	if !tenant {
		return spent(e.t, l, batch)
	}
	_, a, err := l.Read(ctx(e.t), "", "research", spend.PeriodOf("d", e.clock.now()))
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func countState(ps []queue.ProviderBatch, state string) (n int) {
	for _, p := range ps {
		if p.State == state {
			n++
		}
	}
	return n
}
