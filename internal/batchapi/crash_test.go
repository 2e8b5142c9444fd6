package batchapi_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// A worker dies at each step of a record's life (right after the step's
// write, before the next): another worker, started afresh, takes over.
// Whatever the point, no provider batch is created twice (the stand-in's
// count), every item ends with exactly one result (the results stream
// stored as many results as there are items: none was written twice),
// none is lost, and no staged message is left.
func TestCrashAtEachStep(t *testing.T) {
	points := []string{"record-written", "uploaded", "creating", "created", "ended", "results-recorded", "spend-settled", "real-time-sent"}
	for _, prov := range providers {
		for _, point := range points {
			if point == "uploaded" && prov != providers[0] {
				continue // Anthropic takes the requests with the batch
			}
			t.Run(prov+"/"+point, func(t *testing.T) {
				e := newEnv(t, prov)
				const n = 12
				e.enqueue("k1", e.items(n, func(i int) string {
					if i == 5 {
						return "q [fake:status=500]" // one goes to real time: the last step has work
					}
					return fmt.Sprintf("q%d", i)
				}))
				bounds := func(o *batchapi.Options) {
					o.Bounds = map[string]batchapi.Bounds{prov: {MaxRequests: 5, MaxBytes: 1 << 20}}
				}
				a := e.runner(bounds)
				var crashed atomic.Bool
				batchapi.SetCrash(a, func(p string) bool { return p == point && crashed.CompareAndSwap(false, true) })
				deadline := time.Now().Add(30 * time.Second)
				for !crashed.Load() {
					if time.Now().After(deadline) {
						t.Fatalf("never reached %s", point)
					}
					if err := e.step(a); errors.Is(err, batchapi.ErrCrash) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				// The dead worker's claims lapse; a creation that began and
				// got no answer is tried again only after the grace (the
				// clock moved past it).
				b := e.runner(func(o *batchapi.Options) { bounds(o); o.Logger = testLogger(t) })
				if point == "creating" {
					e.clock.add(2 * time.Minute)
				}
				e.until(b, "every record done", func() bool { return len(e.records("k1")) == 3 && e.allDone("k1") })
				if got := e.created(); got != 3 {
					t.Errorf("%d provider batches created, want 3 (12 items, 5 a batch)", got)
				}
				res := e.results("k1")
				lane := e.laneItems("k1", e.model())
				if len(res) != n-1 || len(lane) != 1 {
					t.Errorf("%d results and %d items on the lane, want %d and 1", len(res), len(lane), n-1)
				}
				for id, r := range res {
					if r.Outcome != kftype.OutcomeSucceeded || r.Via == "" {
						t.Errorf("%s: %+v", id, r)
					}
				}
				rs, err := e.q.JetStream().Stream(ctx(t), "BAPI_RESULTS")
				if err != nil {
					t.Fatal(err)
				}
				if st := rs.CachedInfo().State; st.LastSeq != uint64(n-1) {
					t.Errorf("the results stream stored %d results for %d items: some written twice", st.LastSeq, n-1)
				}
				if subs, err := e.q.StagedSubjects(ctx(t), "k1"); err != nil || len(subs) != 0 {
					t.Errorf("staged messages left: %v %v", subs, err)
				}
				// The lane's message is the item's only one: its ID is its own.
				if c, err := e.q.LaneConsumer(ctx(t), kftype.Lane("k1", e.model())); err == nil {
					if info, err := c.Info(ctx(t)); err == nil && info.NumPending+uint64(info.NumAckPending) != 1 {
						t.Errorf("the lane holds %d messages, want 1", info.NumPending+uint64(info.NumAckPending))
					}
				}
				_ = jetstream.ErrMsgNotFound
			})
		}
	}
}
