package batchapi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// The deadline rule, on an injected clock: a provider batch still running
// at the deadline less the margin is cancelled at the provider; what it
// finished keeps its result (via it), the rest runs in real time, and the
// batch's lane is registered. Nothing ran twice: the finished items are
// not on the lane.
func TestDeadlineCancelsAndFallsBack(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("d1", e.items(6, func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf("q%d", i)
				}
				return fmt.Sprintf("q%d [fake:hold]", i)
			}))
			r := e.runner(nil)
			e.until(r, "the provider batch submitted", func() bool {
				ps := e.records("d1")
				return len(ps) == 1 && ps[0].State == queue.PBSubmitted
			})
			// Polled before the deadline: nothing is cancelled.
			for range 5 {
				e.step(r)
				time.Sleep(60 * time.Millisecond)
			}
			if st := e.records("d1")[0]; st.State != queue.PBSubmitted || st.Cancel != "" {
				t.Fatalf("before the deadline: %+v", st)
			}
			e.clock.add(23*time.Hour + time.Minute) // 24 h deadline, 1 h margin
			e.until(r, "the provider batch done", func() bool { return e.allDone("d1") })
			rec := e.records("d1")[0]
			if rec.Cancel != queue.CancelDeadline || rec.Succeeded != 3 || rec.RealTime != 3 {
				t.Errorf("record: %+v", rec)
			}
			var cancels int64
			for _, k := range e.api.Stats().Keys {
				cancels += k.Batch.Cancelled
			}
			if cancels != 1 {
				t.Errorf("%d cancels at the provider, want 1", cancels)
			}
			res, lane := e.results("d1"), e.laneItems("d1", e.model())
			for i := range 6 {
				id := fmt.Sprintf("item-%04d", i)
				_, has := res[id]
				_, queued := lane[id]
				if i%2 == 0 && (!has || queued) || i%2 == 1 && (has || !queued) {
					t.Errorf("%s: result %v, on the lane %v", id, has, queued)
				}
			}
		})
	}
}

// Items whose deadline less the margin has passed before their provider
// batch is created run in real time at once: no provider batch is made.
func TestDeadlineTooCloseRunsRealTime(t *testing.T) {
	e := newEnv(t, providers[0])
	e.enqueueBy("d2", e.items(3, func(i int) string { return fmt.Sprintf("q%d", i) }), time.Now().Add(30*time.Minute))
	r := e.runner(nil)
	e.until(r, "the record done", func() bool { return e.allDone("d2") })
	if rec := e.records("d2")[0]; rec.RealTime != 3 || rec.ProviderID != "" {
		t.Errorf("record: %+v", rec)
	}
	if n := e.created(); n != 0 {
		t.Errorf("%d provider batches created, want none", n)
	}
	e.wantOnLane("d2", 3)
}

// batch cancel: a running provider batch is cancelled at the provider,
// its finished items keep their results and the rest are recorded
// cancelled; staged items not yet in a provider batch are recorded
// cancelled and leave the stream. Nothing goes to real time.
func TestCancelCancelsAtProvider(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("c1", e.items(4, func(i int) string {
				if i < 2 {
					return fmt.Sprintf("q%d", i)
				}
				return fmt.Sprintf("q%d [fake:hold]", i)
			}))
			r := e.runner(nil)
			e.until(r, "the provider batch submitted", func() bool {
				ps := e.records("c1")
				return len(ps) == 1 && ps[0].State == queue.PBSubmitted
			})
			if _, err := e.q.SetBatchState(ctx(t), "c1", kftype.ActionCancel, "test"); err != nil {
				t.Fatal(err)
			}
			e.until(r, "the provider batch done", func() bool { return e.allDone("c1") })
			rec := e.records("c1")[0]
			if rec.Cancel != queue.CancelBatch || rec.Succeeded != 2 || rec.Cancelled != 2 || rec.RealTime != 0 {
				t.Errorf("record: %+v", rec)
			}
			res := e.results("c1")
			for i := range 4 {
				want := kftype.OutcomeSucceeded
				if i >= 2 {
					want = kftype.OutcomeCancelled
				}
				if r := res[fmt.Sprintf("item-%04d", i)]; r.Outcome != want {
					t.Errorf("item %d: %+v, want %s", i, r, want)
				}
			}
			var cancels int64
			for _, k := range e.api.Stats().Keys {
				cancels += k.Batch.Cancelled
			}
			if cancels != 1 {
				t.Errorf("%d cancels at the provider, want 1", cancels)
			}
			e.wantOnLane("c1", 0)
		})
	}
	t.Run("staged", func(t *testing.T) {
		e := newEnv(t, providers[0])
		e.enqueue("c2", e.items(3, func(i int) string { return fmt.Sprintf("q%d", i) }))
		if _, err := e.q.SetBatchState(ctx(t), "c2", kftype.ActionCancel, "test"); err != nil {
			t.Fatal(err)
		}
		r := e.runner(nil)
		e.until(r, "every item cancelled", func() bool { return len(e.results("c2")) == 3 })
		for id, res := range e.results("c2") {
			if res.Outcome != kftype.OutcomeCancelled {
				t.Errorf("%s: %+v", id, res)
			}
		}
		if subs, err := e.q.StagedSubjects(ctx(t), "c2"); err != nil || len(subs) != 0 {
			t.Errorf("staged messages left: %v %v", subs, err)
		}
		if n := e.created(); n != 0 || len(e.records("c2")) != 0 {
			t.Errorf("%d provider batches, %d records: want none", n, len(e.records("c2")))
		}
	})
}

// A paused batch creates no provider batch (its items are checkpointed
// all the same); resumed, it is created.
func TestPausedBatchCreatesNothing(t *testing.T) {
	e := newEnv(t, providers[1])
	e.enqueue("p1", e.items(3, func(i int) string { return fmt.Sprintf("q%d", i) }))
	if _, err := e.q.SetBatchState(ctx(t), "p1", kftype.ActionPause, "test"); err != nil {
		t.Fatal(err)
	}
	r := e.runner(nil)
	e.until(r, "the items checkpointed", func() bool { return len(e.records("p1")) == 1 })
	for range 10 {
		e.step(r)
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.created(); n != 0 {
		t.Fatalf("%d provider batches created while paused", n)
	}
	if _, err := e.q.SetBatchState(ctx(t), "p1", kftype.ActionResume, "test"); err != nil {
		t.Fatal(err)
	}
	e.until(r, "the provider batch done", func() bool { return e.allDone("p1") })
	if n := e.created(); n != 1 || len(e.results("p1")) != 3 {
		t.Errorf("%d created, %d results", n, len(e.results("p1")))
	}
}

// The same file enqueued again past the duplicate window while its items
// sit in a running provider batch adds nothing: what the batch holds
// counts the items of its active provider batch records.
func TestEnqueueAgainWhileInProviderBatch(t *testing.T) {
	e := newEnvWith(t, providers[0], queue.Config{Stream: "BAPI", DuplicateWindow: 2 * time.Second})
	lines := e.items(4, func(i int) string { return fmt.Sprintf("q%d [fake:hold]", i) })
	e.enqueue("again", lines)
	r := e.runner(nil)
	e.until(r, "the provider batch running", func() bool {
		ps := e.records("again")
		return len(ps) == 1 && ps[0].State == queue.PBSubmitted
	})
	time.Sleep(2500 * time.Millisecond) // past the duplicate window
	path := filepath.Join(t.TempDir(), "again.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := enqueue.Run(ctx(t), e.q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "llm", NamedKinds: []string{"llm"},
		Batch: "again", Format: "openai-batch", Provider: e.prov, Deadline: time.Now().Add(24 * time.Hour)})
	if err != nil || rep.New != 0 || rep.Duplicates != 4 {
		t.Fatalf("enqueue again: %+v %v, want 0 new, 4 duplicates", rep, err)
	}
	if subs, _ := e.q.StagedSubjects(ctx(t), "again"); len(subs) != 0 {
		t.Errorf("staged again: %v", subs)
	}
}

// item show: a staged item waits (its message staged, delivered to no
// one); an item in a running provider batch is in state batch-api, with
// its provider batch.
func TestItemShowsWhereItRuns(t *testing.T) {
	e := newEnv(t, providers[0])
	e.enqueue("i1", e.items(2, func(i int) string { return fmt.Sprintf("q%d [fake:hold]", i) }))
	it, err := itemview.Read(ctx(t), e.q, "i1", "item-0001")
	if err != nil || it.State != itemview.StateWaiting || it.Message == nil || !it.Message.Staged || it.Message.Delivered {
		t.Fatalf("staged: %+v %v", it, err)
	}
	r := e.runner(nil)
	e.until(r, "the provider batch running", func() bool {
		ps := e.records("i1")
		return len(ps) == 1 && ps[0].State == queue.PBSubmitted
	})
	it, err = itemview.Read(ctx(t), e.q, "i1", "item-0001")
	if err != nil || it.State != itemview.StateBatchAPI || it.ProviderBatch == nil || it.ProviderBatch.ID == "" || it.Kind != "llm" {
		t.Fatalf("in a provider batch: %+v %v", it, err)
	}
}
