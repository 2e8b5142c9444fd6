package enqueue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// A long enqueue adds what the server stored to the batch's record each
// second while it publishes (a change of the record is what makes the
// workers pull the batch), so that workers start before the whole input is
// published; the record's total ends right, each item counted once.
func TestLongEnqueueRecordsAsItGoes(t *testing.T) {
	// Every 20 ms instead of every second: however fast the machine
	// publishes, the input takes several of them.
	defer enqueue.SetCancelCheckEvery(20 * time.Millisecond)()
	q, _ := open(t)
	const n = 60_000
	path := writeFile(t, "long.jsonl", lines(n, `{"id":"i-%d"}`))
	wctx, stop := context.WithCancel(ctx(t))
	defer stop()
	var midway atomic.Int64 // a total seen between 0 and n
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = q.WatchBatches(wctx, func(b kftype.BatchInfo) {
			if b.ID == "long" && b.Total > 0 && b.Total < n {
				midway.Store(b.Total)
			}
		})
	}()
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Batch: "long", Window: 256})
	if err != nil || rep.New != n {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	b, err := q.Batch(ctx(t), "long")
	if err != nil || b.Total != n {
		t.Fatalf("record after the enqueue: %+v %v, want a total of %d", b, err, n)
	}
	stop()
	<-watching
	if midway.Load() == 0 {
		t.Fatalf("no record with part of the %d items was written while publishing", n)
	}
	t.Logf("a record with %d of %d items was seen while publishing", midway.Load(), n)
}
