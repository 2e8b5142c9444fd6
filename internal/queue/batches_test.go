package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// Concurrent enqueues of one batch add up; kinds are kept; the list and the
// watch see the record.
func TestAddToBatch(t *testing.T) {
	q, _ := open(t)
	seen := make(chan kftype.BatchInfo, 100)
	wctx, stopWatch := context.WithCancel(ctx(t))
	watched := make(chan error, 1)
	go func() { watched <- q.WatchBatches(wctx, func(b kftype.BatchInfo) { seen <- b }) }()

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := "sleep"
			if i == 3 {
				kind = "exec"
			}
			if _, err := q.AddToBatch(ctx(t), "b/1 ü", kind, 10); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := q.AddToBatch(ctx(t), "other", "http", 2); err != nil {
		t.Fatal(err)
	}
	bs, err := q.Batches(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 {
		t.Fatalf("want 2 batches, got %+v", bs)
	}
	byID := map[string]kftype.BatchInfo{bs[0].ID: bs[0], bs[1].ID: bs[1]}
	b := byID["b/1 ü"]
	if b.Total != 80 || b.Kinds.String() != "exec,sleep" || b.EnqueuedAt.IsZero() || b.UpdatedAt.Before(b.EnqueuedAt) {
		t.Errorf("batch b/1 ü: want total 80 of kinds exec,sleep; got %+v", b)
	}
	if bs[0].ID != "other" {
		t.Errorf("want the newest batch first, got %s", bs[0].ID)
	}

	deadline := time.After(10 * time.Second)
	for got := map[string]int64{}; got["b/1 ü"] != 80 || got["other"] != 2; {
		select {
		case b := <-seen:
			got[b.ID] = b.Total
		case <-deadline:
			t.Fatalf("the watch did not see the final totals; saw %v", got)
		}
	}
	stopWatch()
	if err := <-watched; err != nil {
		t.Errorf("watch: %v", err)
	}
}

// FollowResults delivers the latest result of every item, says when it has
// caught up (also on an empty stream), then follows new results.
func TestFollowResults(t *testing.T) {
	q, _ := open(t)
	follow := func(ctx context.Context, got chan<- kftype.Result, caught chan<- struct{}) chan error {
		done := make(chan error, 1)
		go func() {
			done <- q.FollowResults(ctx, func(r kftype.Result) error { got <- r; return nil }, func() { close(caught) })
		}()
		return done
	}
	// Empty stream: caught up at once.
	c1, stop1 := context.WithCancel(ctx(t))
	caught := make(chan struct{})
	done := follow(c1, make(chan kftype.Result, 10), caught)
	testutil.Receive(t, caught, 10*time.Second, "not caught up on an empty stream")
	stop1()
	<-done

	for _, outcome := range []string{kftype.OutcomeFailed, kftype.OutcomeSucceeded} { // a, twice: the latest counts
		if err := q.PutResult(ctx(t), kftype.Result{Item: "a", Batch: "b1", Outcome: outcome}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PutResult(ctx(t), kftype.Result{Item: "b", Batch: "b2", Outcome: kftype.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	c2, stop2 := context.WithCancel(ctx(t))
	defer stop2()
	got := make(chan kftype.Result, 10)
	caught = make(chan struct{})
	done = follow(c2, got, caught)
	seen := map[string]string{}
	for len(seen) < 2 {
		select {
		case r := <-got:
			seen[r.Batch+"/"+r.Item] = r.Outcome
		case <-time.After(10 * time.Second):
			t.Fatalf("saw %v", seen)
		}
	}
	testutil.Receive(t, caught, 10*time.Second, "not caught up after the existing results")
	if seen["b1/a"] != kftype.OutcomeSucceeded || len(got) != 0 {
		t.Fatalf("want the latest outcome of each item once, got %v (+%d)", seen, len(got))
	}
	if err := q.PutResult(ctx(t), kftype.Result{Item: "c", Batch: "b1", Outcome: kftype.OutcomeFailed}); err != nil {
		t.Fatal(err)
	}
	r := testutil.Receive(t, got, 10*time.Second, "a new result was not followed")
	if r.Item != "c" {
		t.Fatalf("want the new result c, got %+v", r)
	}
	stop2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("want the context's cause at the end, got %v", err)
	}
}
