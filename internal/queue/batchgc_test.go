package queue_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// A batch's record lives as long as the batch holds items or results,
// however long ago it last changed (before, the bucket's TTL deleted it
// after results_max_age: a batch paused for a week could not be resumed,
// a cancelled one took items again); once it holds nothing, the sweep
// deletes it and watchers hear of it.
func TestBatchRecordsLiveWhileTheBatchHoldsSomething(t *testing.T) {
	q, _ := open(t)
	if _, err := q.Publish(ctx(t), items("paused", 2)...); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"paused", "done", "empty"} {
		if _, err := q.AddToBatch(ctx(t), b, "sleep", 2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.SetBatchState(ctx(t), "paused", kftype.ActionPause, "test"); err != nil {
		t.Fatal(err)
	}
	if err := q.PutResult(ctx(t), kftype.Result{Item: "x", Batch: "done", Outcome: kftype.OutcomeSucceeded, FinishedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	st, err := q.JetStream().KeyValue(ctx(t), "KEYFLEET_BATCHES")
	if err != nil {
		t.Fatal(err)
	}
	status, err := st.Status(ctx(t))
	if err != nil || status.TTL() != 0 {
		t.Fatalf("batch bucket TTL %v (%v): want none", status.TTL(), err)
	}

	var mu sync.Mutex
	var deleted []string
	wctx, stop := context.WithCancel(ctx(t))
	defer stop()
	go func() {
		_ = q.WatchBatches(wctx, func(b kftype.BatchInfo) {
			if b.Deleted {
				mu.Lock()
				deleted = append(deleted, b.ID)
				mu.Unlock()
			}
		})
	}()

	// An hour after their last change nothing is deleted yet; a week
	// after, the batch that holds nothing goes.
	if gone, err := q.SweepBatchRecords(ctx(t), time.Now().Add(30*time.Minute)); err != nil || len(gone) != 0 {
		t.Fatalf("sweep 30 min on: %v %v, want nothing deleted", gone, err)
	}
	gone, err := q.SweepBatchRecords(ctx(t), time.Now().Add(8*24*time.Hour))
	if err != nil || !slices.Equal(gone, []string{"empty"}) {
		t.Fatalf("sweep 8 days on: %v %v, want [empty]", gone, err)
	}
	for _, b := range []string{"paused", "done"} {
		if _, err := q.Batch(ctx(t), b); err != nil {
			t.Errorf("batch %s, which holds something, lost its record: %v", b, err)
		}
	}
	if _, err := q.SetBatchState(ctx(t), "paused", kftype.ActionResume, "test"); err != nil {
		t.Errorf("resuming the old paused batch: %v", err)
	}
	testutil.WaitFor(t, "the watch to see batch empty deleted", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(deleted, []string{"empty"})
	})
}
