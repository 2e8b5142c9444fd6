package batchapi_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/metrics"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// A provider slow to end a cancel for the deadline (the stand-in keeps it
// cancelling) is waited for half the margin, no more: then every item of
// its provider batch goes to real time, while the record, "late", keeps
// its budget reservation and is polled on. The items run in real time
// (their results written here as a worker would). When the provider ends
// the cancel, the requests it finished before the cancel are not recorded
// (each item keeps real time's result, the results stream stored one per
// item), nothing is sent to real time again, and they count: the
// record's and /metrics' spent twice, and their cost, at the Batch API's
// price, in the batch's spend in place of the reservation. A worker that
// dies at any point of this is replaced by another with the same end.
func TestSlowCancelGivesUpAtHalfTheMargin(t *testing.T) {
	for _, prov := range providers {
		for _, point := range []string{"", "gave-up", "gave-up-sent", "late-settled"} {
			t.Run(prov+"/"+point, func(t *testing.T) {
				e := newEnv(t, prov)
				e.api.SetCancelDelay(time.Hour)
				l := e.priced()
				const n = 6
				e.enqueueWith("slow", e.boundedItems(n, func(i int) string {
					if i%2 == 0 {
						return fmt.Sprintf("q%d", i) // done before the cancel
					}
					return fmt.Sprintf("q%d [fake:hold]", i)
				}), e.clock.now().Add(24*time.Hour), withBudget(l, spend.Unit))
				m := metrics.New()
				withMetrics := func(o *batchapi.Options) { o.Metrics = m }
				r := e.runner(withMetrics)
				var crashed atomic.Bool
				batchapi.SetCrash(r, func(p string) bool { return p == point && crashed.CompareAndSwap(false, true) })
				// step steps r until a crash, then a new worker in its place.
				step := func() {
					if err := e.step(r); errors.Is(err, batchapi.ErrCrash) {
						r = e.runner(withMetrics)
					}
				}
				until := func(what string, cond func() bool) {
					t.Helper()
					deadline := time.Now().Add(30 * time.Second)
					for !cond() {
						if time.Now().After(deadline) {
							t.Fatalf("timed out waiting for %s: %+v", what, e.records("slow"))
						}
						step()
						time.Sleep(20 * time.Millisecond)
					}
				}
				record := func() queue.ProviderBatch {
					ps := e.records("slow")
					if len(ps) != 1 {
						t.Fatalf("%d records, want 1", len(ps))
					}
					return ps[0]
				}
				until("the provider batch submitted", func() bool { return e.created() == 1 && record().State == queue.PBSubmitted })
				reserved := spent(t, l, "slow").Reserved
				if reserved == 0 {
					t.Fatal("no reservation under the budget")
				}
				e.clock.add(23*time.Hour + time.Minute) // the deadline less the margin (1 h)
				until("the provider batch cancelled", func() bool { return record().State == queue.PBCancelling })
				for range 5 {
					step()
				}
				if p := record(); p.State != queue.PBCancelling || len(e.results("slow")) != 0 || e.laneCount("slow") != 0 {
					t.Fatalf("within half the margin: %+v, %d results, %d on the lane; want it waited for", p, len(e.results("slow")), e.laneCount("slow"))
				}

				e.clock.add(31 * time.Minute) // half the margin since the cancel
				until("the record late", func() bool { return record().State == queue.PBLate })
				p := record()
				if p.RealTime != n || p.GaveUpAt.IsZero() || p.Cancel != queue.CancelDeadline {
					t.Errorf("late record: %+v", p)
				}
				if got := e.laneCount("slow"); got != n {
					t.Errorf("%d messages on the lane, want %d: every item in real time", got, n)
				}
				if a := spent(t, l, "slow"); a.Reserved != reserved {
					t.Errorf("reserved %v while the provider may still bill, want %v (the record's)", a.Reserved, reserved)
				}
				for i := range n {
					res := kftype.Result{Item: fmt.Sprintf("item-%04d", i), Batch: "slow", Kind: "llm", Outcome: kftype.OutcomeSucceeded,
						Attempts: 1, StatusCode: 200, Worker: "real-time", FinishedAt: time.Now()}
					if err := e.q.PutResult(ctx(t), res); err != nil {
						t.Fatal(err)
					}
				}

				e.api.SetCancelDelay(0)
				until("the record done", func() bool { return record().State == queue.PBDone })
				p = record()
				if p.SpentTwice != n/2 || p.Succeeded != 0 || p.RealTime != n || p.Completed != n/2 {
					t.Errorf("done: %+v, want %d spent twice, none recorded", p, n/2)
				}
				for id, res := range e.results("slow") {
					if res.Worker != "real-time" || res.Via != "" {
						t.Errorf("%s: %+v, want real time's result", id, res)
					}
				}
				rs, err := e.q.JetStream().Stream(ctx(t), "BAPI_RESULTS")
				if err != nil {
					t.Fatal(err)
				}
				if st := rs.CachedInfo().State; st.LastSeq != n {
					t.Errorf("the results stream stored %d results for %d items", st.LastSeq, n)
				}
				if got := e.laneCount("slow"); got != n {
					t.Errorf("%d messages on the lane, want %d: none sent twice", got, n)
				}
				price := prices[e.model()]
				bu := e.api.Stats().ModelUsage()[e.model()].Batch
				if bu.Requests != n/2 {
					t.Errorf("the stand-in ran %d requests through the Batch API, want %d", bu.Requests, n/2)
				}
				if a, want := spent(t, l, "slow"), price.Of(bu.InputTokens, bu.OutputTokens, 0.5); a.Spent != want || a.Reserved != 0 {
					t.Errorf("the ledger: %+v, want spent %v (what the provider billed, half off) and nothing reserved", a, want)
				}
				if got := counterValue(t, m, "keyfleet_batch_api_requests_spent_twice_total", map[string]string{"provider": prov}); got != n/2 {
					t.Errorf("keyfleet_batch_api_requests_spent_twice_total %v, want %d", got, n/2)
				}
				if point != "" && !crashed.Load() {
					t.Errorf("never reached %s", point)
				}
			})
		}
	}
}

// A cancel for the deadline made late (the workers were away) is waited
// for only until the deadline less half the margin: its items keep the
// other half in real time.
func TestLateCancelWaitsLess(t *testing.T) {
	e := newEnv(t, providers[0])
	e.api.SetCancelDelay(time.Hour)
	e.enqueue("lc", e.items(2, func(i int) string { return fmt.Sprintf("q%d [fake:hold]", i) }))
	r := e.runner(nil)
	e.until(r, "the provider batch submitted", func() bool {
		ps := e.records("lc")
		return len(ps) == 1 && ps[0].State == queue.PBSubmitted
	})
	e.clock.add(23*time.Hour + 20*time.Minute) // 40 min before the deadline (past it less the margin): cancelled now
	e.until(r, "the provider batch cancelled", func() bool { return e.records("lc")[0].State == queue.PBCancelling })
	for range 5 {
		e.step(r)
	}
	if p := e.records("lc")[0]; p.State != queue.PBCancelling {
		t.Fatalf("given up before the deadline less half the margin: %+v", p)
	}
	e.clock.add(11 * time.Minute) // 29 min before the deadline, 11 min after the cancel
	e.until(r, "the record late", func() bool { return e.records("lc")[0].State == queue.PBLate })
	e.wantOnLane("lc", 2)
}

// laneCount is how many messages batch's lane of the model holds.
func (e *env) laneCount(batch string) int {
	e.t.Helper()
	c, err := e.q.LaneConsumer(ctx(e.t), kftype.Lane(batch, e.model()))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(ctx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return int(info.NumPending) + info.NumAckPending
}

// counterValue reads a counter of m with exactly these labels (0: none).
func counterValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, c := range mf.GetMetric() {
			if len(c.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range c.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return c.GetCounter().GetValue()
		}
	}
	return 0
}
