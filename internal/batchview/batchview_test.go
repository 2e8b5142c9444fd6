package batchview

import (
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// State and Row: the one definition of a batch's row that the CLI and the
// dashboard show.
func TestStateAndRow(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(state kftype.BatchState, total int64) kftype.BatchInfo {
		return kftype.BatchInfo{ID: "b", Kinds: kftype.Kinds{"exec"}, Total: total, State: state, EnqueuedAt: t0,
			Priority: kftype.PriorityDefault, Weight: kftype.WeightDefault}
	}
	tally := func(ok, failed, cancelled int64) Tally {
		return Tally{Succeeded: ok, Failed: failed, Cancelled: cancelled, Kind: "sleep", First: t0.Add(time.Second), Last: t0.Add(9 * time.Second)}
	}
	for _, c := range []struct {
		name     string
		rec      kftype.BatchInfo
		known    bool
		tally    Tally
		state    string
		complete bool
	}{
		{"new, nothing done", rec(kftype.BatchRunning, 10), true, Tally{}, StateRunning, false},
		{"running", rec(kftype.BatchRunning, 10), true, tally(3, 1, 0), StateRunning, false},
		{"every item has an outcome", rec(kftype.BatchRunning, 10), true, tally(8, 2, 0), StateDone, true},
		{"paused", rec(kftype.BatchPaused, 10), true, tally(3, 0, 0), StatePaused, false},
		{"paused while its last items ran: done", rec(kftype.BatchPaused, 10), true, tally(10, 0, 0), StateDone, true},
		{"cancelled, items still out", rec(kftype.BatchCancelled, 10), true, tally(3, 0, 5), StateCancelled, false},
		{"cancelled and all recorded", rec(kftype.BatchCancelled, 10), true, tally(3, 1, 6), StateCancelled, true},
		{"more results than the record knows", rec(kftype.BatchRunning, 2), true, tally(3, 0, 0), StateDone, true},
		{"results without a record", kftype.BatchInfo{}, false, tally(4, 0, 0), StateRunning, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := State(c.rec, c.known, c.tally); got != c.state {
				t.Fatalf("State: want %s, got %s", c.state, got)
			}
			row := Row("b", c.rec, c.known, c.tally)
			if row.State != c.state || row.Complete != c.complete || row.Done != c.tally.Done() ||
				row.Succeeded != c.tally.Succeeded || row.Failed != c.tally.Failed || row.Cancelled != c.tally.Cancelled {
				t.Fatalf("Row: %+v", row)
			}
			if c.known && (row.Total != c.rec.Total || row.Kind != "exec" || row.EnqueuedAt == nil || !row.TotalKnown) {
				t.Fatalf("Row of a record: %+v", row)
			}
			if !c.known && (row.Total != row.Done || row.Kind != "sleep" || row.TotalKnown || row.EnqueuedAt != nil) {
				t.Fatalf("Row without a record: %+v", row)
			}
			if row.Priority != kftype.PriorityDefault || row.Weight != kftype.WeightDefault || row.History == nil || row.LastChange != nil {
				t.Fatalf("Row defaults: %+v", row)
			}
		})
	}
}

// The history and the last change come from the record; the ETA is set
// only while items are left at a known rate, never for a cancelled batch.
func TestRowHistoryAndETA(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hist := []kftype.BatchEvent{{At: now, Action: kftype.ActionPause, By: "a@h"}, {At: now, Action: kftype.ActionResume, By: "b@h"}}
	rec := kftype.BatchInfo{ID: "b", Total: 100, Priority: 1, Weight: 7, State: kftype.BatchRunning, History: hist}
	row := Row("b", rec, true, Tally{Succeeded: 40})
	if row.Priority != 1 || row.Weight != 7 || len(row.History) != 2 || row.LastChange == nil || row.LastChange.By != "b@h" {
		t.Fatalf("row: %+v", row)
	}
	row.SetRate(10, now)
	if row.ETASeconds == nil || *row.ETASeconds != 6 || !row.ETA.Equal(now.Add(6*time.Second)) {
		t.Fatalf("ETA of 60 items left at 10/s: %v %v", row.ETASeconds, row.ETA)
	}
	rec.State = kftype.BatchCancelled
	row = Row("b", rec, true, Tally{Succeeded: 40})
	if row.SetRate(10, now); row.ETA != nil || row.Rate != 10 {
		t.Fatalf("a cancelled batch has no ETA: %+v", row)
	}
}

// The counter of a reading counts each item once, by the last result read
// (an item's new outcome stored while the stream is read comes too), and
// the items finished lately for the rate.
func TestCounterLatestOnce(t *testing.T) {
	now := time.Now()
	c := newCounter(now)
	res := func(batch, item, outcome string, ago time.Duration) {
		if err := c.add(kftype.Result{Batch: batch, Item: item, Kind: "sleep", Outcome: outcome, FinishedAt: now.Add(-ago)}); err != nil {
			t.Fatal(err)
		}
	}
	res("b", "i1", kftype.OutcomeFailed, 2*time.Minute)
	res("b", "i2", kftype.OutcomeSucceeded, 90*time.Second)
	res("b", "i3", kftype.OutcomeCancelled, 30*time.Second)
	res("b", "i1", kftype.OutcomeSucceeded, 20*time.Second) // i1 again: now succeeded
	res("b", "i4", kftype.OutcomeFailed, 10*time.Second)
	res("other", "i1", kftype.OutcomeFailed, time.Second)
	tally, recent := c.tally("b")
	if tally.Succeeded != 2 || tally.Failed != 1 || tally.Cancelled != 1 || recent != 3 {
		t.Fatalf("want 2 succeeded, 1 failed, 1 cancelled, 3 lately; got %+v, %d lately", tally, recent)
	}
	if !tally.First.Equal(now.Add(-2*time.Minute)) || !tally.Last.Equal(now.Add(-10*time.Second)) || tally.Kind != "sleep" {
		t.Fatalf("tally: %+v", tally)
	}
	row := c.row("b", kftype.BatchInfo{ID: "b", Total: 10, EnqueuedAt: now.Add(-3 * time.Minute)}, true, now)
	if row.Rate != 3.0/60 || row.ETASeconds == nil {
		t.Fatalf("rate of 3 items in the last minute: %v (eta %v)", row.Rate, row.ETASeconds)
	}
	if o, _ := c.tally("other"); o.Failed != 1 || o.Done() != 1 {
		t.Fatalf("other: %+v", o)
	}
}
