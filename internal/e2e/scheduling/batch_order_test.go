package scheduling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// orderFleet is a small fleet whose keys are the bottleneck: 2 keys of
// max_concurrent 1, one worker of 2 slots, sleep items.
func orderFleet(t *testing.T) *e2etest.Fleet {
	t.Helper()
	return e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A}\n- {id: key-b, secret_env: KEY_B}",
		Worker:      "concurrency: 2\nshutdown_grace: 5s",
		// A killed worker's unacknowledged items come back soon.
		Queue: "ack_wait: 2s",
		Env:   []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"]},
	})
}

// enqueueBatch enqueues n sleep items of ms milliseconds as batch through
// the producer binary, with its extra flags (--priority, --weight).
func enqueueBatch(f *e2etest.Fleet, batch string, n, ms int, flags ...string) {
	f.T.Helper()
	path := f.WriteInput(batch+".jsonl", e2etest.JSONLItems(n, `{"id":%q,"ms":`+fmt.Sprint(ms)+`}`))
	args := append([]string{"enqueue", "--kind", "sleep", "--batch", batch}, flags...)
	if r := f.Producer(nil, append(args, path)...); r.Code != 0 {
		f.T.Fatalf("enqueue %s:\n%s", batch, r)
	}
}

// finished lists the results of every batch in the order they finished.
func finished(f *e2etest.Fleet) []kftype.Result {
	f.T.Helper()
	var out []kftype.Result
	if err := f.Queue.ReadResults(context.Background(), "", func(r kftype.Result) error {
		out = append(out, r)
		return nil
	}); err != nil {
		f.T.Fatal(err)
	}
	slices.SortFunc(out, func(a, b kftype.Result) int { return a.FinishedAt.Compare(b.FinishedAt) })
	return out
}

// An urgent batch (priority 1) enqueued behind a long backlog (priority 3)
// runs at once: while it has items, the backlog gets only what was already
// pulled when it came (at most the fleet's slots).
func TestUrgentBatchOvertakesBacklog(t *testing.T) {
	f := orderFleet(t)
	enqueueBatch(f, "bulk", 400, 10)
	w := f.StartWorker("w1")
	testutil.WaitFor(t, "30 bulk items done", time.Minute, func() bool { return len(finished(f)) >= 30 })
	enqueueBatch(f, "urgent", 20, 10, "--priority", "1")
	f.WaitResults("urgent", 20, time.Minute)
	var bulkDuring int
	urgentLeft := 20
	started := false
	for _, r := range finished(f) {
		switch {
		case r.Batch == "urgent":
			started = true
			urgentLeft--
		case started && urgentLeft > 0:
			bulkDuring++
		}
	}
	// Between the urgent batch's first and last result, the bulk batch
	// finishes only the items it held already: 2 slots, and a fetch on its
	// way.
	if bulkDuring > 4 {
		t.Fatalf("%d bulk items finished while the urgent batch ran (want at most 4: strict priority)", bulkDuring)
	}
	bulk := 0
	for _, r := range finished(f) {
		if r.Batch == "bulk" {
			bulk++
		}
	}
	if bulk >= 400 {
		t.Fatal("the bulk batch finished first: the test did not exercise the backlog")
	}
	w.Signal(syscall.SIGTERM)
	w.WaitExit(t, 20*time.Second)
	t.Logf("bulk items finished while the urgent batch ran: %d; bulk done meanwhile: %d of 400", bulkDuring, bulk)
}

// Batches of one priority share the keys by weight, whatever their sizes
// and the order they came in: with weights 3 and 1 and both backlogged,
// the first gets about three items for each of the second's. Two workers
// have more slots than there are keys, so items wait for keys in their
// slots: the batches share those waiting slots in the schedule's order
// (they want the same keys), not half each (which gave about 2:1).
func TestBatchesShareByWeight(t *testing.T) {
	var creds []string
	var env []string
	for _, k := range []string{"a", "b", "c", "d"} {
		creds = append(creds, fmt.Sprintf("- {id: key-%s, secret_env: KEY_%s}", k, strings.ToUpper(k)))
		env = append(env, fmt.Sprintf("KEY_%s=sk-test-weights-%s", strings.ToUpper(k), k))
	}
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: strings.Join(creds, "\n"),
		Worker:      "concurrency: 4\nshutdown_grace: 5s",
		Env:         env,
	})
	enqueueBatch(f, "light", 1000, 10, "--weight", "1")
	enqueueBatch(f, "heavy", 1000, 10, "--weight", "3")
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	testutil.WaitFor(t, "840 items done", time.Minute, func() bool { return len(finished(f)) >= 840 })
	count := map[string]int{}
	// Both backlogged, past the first fetches; 800 items span many of the
	// schedule's turns (lanes.TurnDefault: 50 ms, some 20 items here).
	for _, r := range finished(f)[40:840] {
		count[r.Batch]++
	}
	ratio := float64(count["heavy"]) / float64(max(count["light"], 1))
	if ratio < 2.6 || ratio > 3.5 {
		t.Fatalf("heavy:light = %d:%d (%.2f), want about 3", count["heavy"], count["light"], ratio)
	}
	for _, w := range []*e2etest.Process{w1, w2} {
		w.Signal(syscall.SIGTERM)
		w.WaitExit(t, 20*time.Second)
	}
	t.Logf("weights 3:1 gave %d:%d (%.2f)", count["heavy"], count["light"], ratio)
}

// A paused batch stays paused and a cancelled one cancelled across a
// worker's SIGKILL, a NATS restart and a Redis restart that loses its
// state: their state lives in the batch record in NATS (file storage),
// and the Redis schedule is rebuilt from it. Nothing is lost: the paused
// batch runs every item once resumed; the cancelled one's items are all
// recorded cancelled.
func TestBatchStateSurvivesRestarts(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f := orderFleet(t)
	start := time.Now()
	enqueueBatch(f, "held", 30, 1)
	enqueueBatch(f, "dropped", 30, 1)
	ctx := context.Background()
	if _, err := f.Queue.SetBatchState(ctx, "held", kftype.ActionPause, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Queue.SetBatchState(ctx, "dropped", kftype.ActionCancel, "test"); err != nil {
		t.Fatal(err)
	}
	enqueueBatch(f, "free", 20, 1)
	w1 := f.StartWorker("w1")
	f.WaitResults("free", 20, time.Minute)
	w1.Signal(syscall.SIGKILL)
	w1.WaitExit(t, 10*time.Second)
	f.NATS.Restart()
	f.Redis.Restart()
	w2 := f.StartWorker("w2")
	enqueueBatch(f, "after", 10, 1)
	f.WaitResults("after", 10, time.Minute)
	// The cancelled batch's items are all recorded cancelled (the workers'
	// sweeper drains it), none ran; the paused batch ran nothing.
	dropped := f.WaitResults("dropped", 30, time.Minute)
	for id, r := range dropped {
		if r.Outcome != kftype.OutcomeCancelled {
			t.Errorf("dropped/%s: %+v, want cancelled", id, r)
		}
	}
	for _, r := range finished(f) {
		if r.Batch == "held" {
			t.Fatalf("an item of the paused batch ran: %+v", r)
		}
	}
	b, err := f.Queue.Batch(ctx, "held")
	if err != nil || b.State != kftype.BatchPaused {
		t.Fatalf("held after the restarts: %+v %v", b, err)
	}
	if _, err := f.Queue.SetBatchState(ctx, "held", kftype.ActionResume, "test"); err != nil {
		t.Fatal(err)
	}
	held := f.WaitResults("held", 30, time.Minute)
	lost := 0
	for _, r := range held {
		if r.Outcome != kftype.OutcomeSucceeded || r.Attempts != 1 {
			lost++
		}
	}
	// The killed worker's last item may have its result stored but not
	// its ack: it comes back after the ack wait and runs again (a
	// duplicate, not a loss).
	testutil.WaitFor(t, "the stream to be empty", 20*time.Second, func() bool { return f.QueueStats().Stream.Messages == 0 })
	w2.Signal(syscall.SIGTERM)
	w2.WaitExit(t, 20*time.Second)
	row := e2etest.ReliabilityRow{Scenario: "Batch paused and batch cancelled across SIGKILL, NATS and Redis restarts", Items: 90,
		Lost: lost, Took: time.Since(start), Passed: lost == 0 && !t.Failed(),
		Note: "state in the NATS batch record; Redis schedule rebuilt; paused ran 0 until resumed, then 30 once; cancelled 30 recorded cancelled"}
	e2etest.RecordRow(row)
	if lost > 0 {
		t.Fatalf("%d items of the resumed batch did not succeed once", lost)
	}
	if logs := f.Logs(); strings.Contains(logs, e2etest.Secrets["key-a"]) {
		t.Fatal("a secret reached the logs")
	}
}
