package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// Concurrent enqueues of one batch add up; kinds are kept; the list and the
// watch see the record.
func TestAddToBatch(t *testing.T) {
	q, _ := open(t)
	seen := make(chan queue.BatchInfo, 100)
	wctx, stopWatch := context.WithCancel(ctx(t))
	watched := make(chan error, 1)
	go func() { watched <- q.WatchBatches(wctx, func(b queue.BatchInfo) { seen <- b }) }()

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
	byID := map[string]queue.BatchInfo{bs[0].ID: bs[0], bs[1].ID: bs[1]}
	b := byID["b/1 ü"]
	if b.Total != 80 || b.Kind != "exec,sleep" || b.EnqueuedAt.IsZero() || b.UpdatedAt.Before(b.EnqueuedAt) {
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
