package queue_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// AddToBatch's options set priority and weight; 0 keeps the record's;
// Batch reads one record, ErrNoBatch for an unknown batch.
func TestBatchPriorityWeightAndGet(t *testing.T) {
	q, _ := open(t)
	if _, err := q.Batch(ctx(t), "nope"); !errors.Is(err, queue.ErrNoBatch) {
		t.Fatalf("unknown batch: want ErrNoBatch, got %v", err)
	}
	if _, err := q.AddToBatch(ctx(t), "urgent", "sleep", 3, queue.WithPriority(1), queue.WithWeight(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddToBatch(ctx(t), "urgent", "sleep", 2, queue.WithPriority(0), queue.WithWeight(0)); err != nil {
		t.Fatal(err)
	}
	b, err := q.Batch(ctx(t), "urgent")
	if err != nil {
		t.Fatal(err)
	}
	if b.Total != 5 || b.Priority != 1 || b.Weight != 7 || b.Rev == 0 {
		t.Fatalf("want 5 items, priority 1, weight 7 kept, a revision; got %+v", b)
	}
	if _, err := q.AddToBatch(ctx(t), "plain", "sleep", 1); err != nil {
		t.Fatal(err)
	}
	if b, err := q.Batch(ctx(t), "plain"); err != nil || b.Priority != kftype.PriorityDefault || b.Weight != kftype.WeightDefault || b.State != kftype.BatchRunning {
		t.Fatalf("a batch enqueued without them has the defaults: %+v %v", b, err)
	}
}

// WriteResults writes each item's latest result as one JSON line, HTML
// characters as they are, and counts the failed ones.
func TestWriteResults(t *testing.T) {
	q, _ := open(t)
	for _, r := range []kftype.Result{
		{Item: "a", Batch: "w", Outcome: kftype.OutcomeFailed},
		{Item: "a", Batch: "w", Outcome: kftype.OutcomeSucceeded, Output: "<b>&</b>"},
		{Item: "b", Batch: "w", Outcome: kftype.OutcomeFailed, Error: "boom"},
		{Item: "c", Batch: "other", Outcome: kftype.OutcomeSucceeded},
	} {
		if err := q.PutResult(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := q.WriteResults(ctx(t), "w", &buf)
	if err != nil || n.Results != 2 || n.Failed != 1 {
		t.Fatalf("want 2 results, 1 failed; got %+v %v", n, err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(buf.String(), `"output":"<b>&</b>"`) {
		t.Fatalf("want 2 lines with the output unescaped, got\n%s", buf.String())
	}
	for _, l := range lines {
		var r kftype.Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Batch != "w" {
			t.Fatalf("line %q: %v", l, err)
		}
	}
}
