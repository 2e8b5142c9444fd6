package dashboard

import (
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Each item counts once, by its latest outcome; a batch's total comes from
// its record; rate and ETA follow the samples of the last minute.
func TestTallyRows(t *testing.T) {
	tl := newTally()
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	res := func(batch, item, outcome string, at time.Time) kftype.Result {
		return kftype.Result{Batch: batch, Item: item, Kind: "exec", Outcome: outcome, FinishedAt: at}
	}
	tl.record(kftype.BatchInfo{ID: "run", Kinds: kftype.Kinds{"exec"}, Total: 10, EnqueuedAt: t0, UpdatedAt: t0})
	tl.result(res("run", "a", kftype.OutcomeSucceeded, t0.Add(time.Second)))
	tl.result(res("run", "b", kftype.OutcomeFailed, t0.Add(time.Second)))
	tl.result(res("run", "a", kftype.OutcomeSucceeded, t0.Add(time.Second))) // read again: no change
	tl.result(res("run", "b", kftype.OutcomeSucceeded, t0.Add(2*time.Second)))
	tl.result(res("old", "x", kftype.OutcomeSucceeded, t0.Add(-time.Hour)))

	// Before the first full reading of the results there is no rate.
	rows := tl.rows(t0.Add(3 * time.Second))
	if len(rows) != 2 || rows[0].ID != "run" {
		t.Fatalf("want the running batch first of 2, got %+v", rows)
	}
	r := rows[0]
	if r.Done != 2 || r.Succeeded != 2 || r.Failed != 0 || r.Total != 10 || !r.TotalKnown || r.Complete || r.Rate != 0 || r.ETASeconds != nil {
		t.Fatalf("run: want 2 of 10 succeeded, no rate yet; got %+v", r)
	}
	if o := rows[1]; o.ID != "old" || o.TotalKnown || o.Total != 1 || o.Done != 1 {
		t.Errorf("a batch without a record shows its results as its total, unknown: got %+v", o)
	}

	tl.caughtUp()
	now := t0.Add(10 * time.Second)
	tl.rows(now)
	for i, item := range []string{"c", "d", "e", "f"} {
		tl.result(res("run", item, kftype.OutcomeSucceeded, now.Add(time.Duration(i)*time.Second)))
	}
	rows = tl.rows(now.Add(4 * time.Second))
	r = rows[0]
	if r.Done != 6 || r.Rate != 1 || r.ETASeconds == nil || *r.ETASeconds != 4 || r.ETA == nil {
		t.Fatalf("run: want 6 done at 1 item/s, ETA 4s; got %+v", r)
	}
	for _, item := range []string{"g", "h", "i", "j"} {
		tl.result(res("run", item, kftype.OutcomeFailed, now.Add(8*time.Second)))
	}
	r = tl.rows(now.Add(9 * time.Second))[0]
	if !r.Complete || r.Done != 10 || r.Failed != 4 || r.ETASeconds != nil || r.Rate != 10.0/18 {
		t.Fatalf("run: want complete with 4 failed, rate over the whole run (10 in 18s); got %+v", r)
	}
}
