package producer

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// enqueue --wait against a running fleet of two workers, with some items
// failing for good and one worker killed mid-batch (its items are
// redelivered): the summary counts each item once, matches the results,
// and the exit code is 1.
func TestProducerWaitReportsExactCounts(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 3}
- {id: key-b, secret_env: KEY_B, max_concurrent: 3}`,
		Pool:   "lease_ttl: 2s",
		Worker: "concurrency: 3\nretry_backoff: [100ms]",
		Queue:  "ack_wait: 2s",
		Env:    []string{"KEY_A=sk-a", "KEY_B=sk-b"},
	})
	const n, bad = 60, 7
	var b strings.Builder
	for i := range n {
		if i%9 == 4 {
			fmt.Fprintf(&b, `{"id":"item-%04d","ms":"x"}`+"\n", i) // a permanent failure
		} else {
			fmt.Fprintf(&b, `{"id":"item-%04d","ms":300}`+"\n", i)
		}
	}
	path := f.WriteInput("items.jsonl", b.String())
	w1 := f.StartWorker("w1")
	f.StartWorker("w2")
	p := f.Start("producer", e2etest.Binary(t, "producer"), "enqueue", "--wait", "--kind", "sleep", "--config", f.ConfigPath, path)

	// Kill w1 while it holds a credential: its items come back after the
	// ack wait and run again on w2 (or w3).
	testutil.WaitFor(t, "w1 to hold a lease", time.Minute, func() bool {
		r := f.Producer(nil, "status", "--json")
		return r.Code == 0 && strings.Contains(r.Stdout, `"owner": "w1/`)
	})
	w1.Signal(syscall.SIGKILL)
	f.StartWorker("w3")

	code := p.WaitExit(t, 3*time.Minute)
	out := p.Log.String()
	if code != 1 {
		t.Fatalf("want exit 1 (some items failed), got %d:\n%s", code, out)
	}
	m := regexp.MustCompile(`Enqueued batch (\S+):`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no batch in:\n%s", out)
	}
	batch := m[1]
	sum := e2etest.WaitSummary(t, out)
	want := map[string]string{"Total": fmt.Sprint(n), "Succeeded": fmt.Sprint(n - bad), "Failed": fmt.Sprint(bad)}
	for k, v := range want {
		if sum[k] != v {
			t.Fatalf("summary %s: want %s, got %s:\n%s", k, v, sum[k], out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("%d of %d items failed", bad, n)) || !strings.Contains(out, `field "ms" must be a number`) {
		t.Fatalf("the failures are not explained:\n%s", out)
	}

	// The results agree with the summary; count the redelivered items.
	results := f.WaitResults(batch, n, time.Minute)
	succeeded, failed, rerun := 0, 0, 0
	for _, r := range results {
		switch r.Outcome {
		case kftype.OutcomeSucceeded:
			succeeded++
		case kftype.OutcomeFailed:
			failed++
		}
		if r.Attempts > 1 {
			rerun++
		}
	}
	if succeeded != n-bad || failed != bad {
		t.Fatalf("results: %d succeeded, %d failed", succeeded, failed)
	}
	if rerun == 0 {
		t.Logf("note: w1 had no item in flight when it was killed; no item ran twice")
	}
	t.Logf("%d items, 2 workers (one killed mid-batch): summary %v; %d items ran more than once", n, sum, rerun)
}

// Ctrl-C while waiting stops the waiting, not the batch: exit 130, a hint
// on how to follow the batch, the items stay queued.
func TestProducerWaitInterrupted(t *testing.T) {
	f := e2etest.SleepOnlyFleet(t, "", "")
	const n = 5
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q,"ms":1}`))
	p := f.Start("producer", e2etest.Binary(t, "producer"), "enqueue", "--wait", "--kind", "sleep", "--config", f.ConfigPath, path)
	testutil.WaitFor(t, "the items to be enqueued", time.Minute, func() bool { return strings.Contains(p.Log.String(), "Enqueued batch") })
	p.Signal(syscall.SIGINT)
	if code := p.WaitExit(t, 30*time.Second); code != 130 {
		t.Fatalf("want exit 130, got %d:\n%s", code, p.Log.String())
	}
	out := p.Log.String()
	for _, w := range []string{"stopped waiting", "the batch goes on", "producer results --batch"} {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
	if st := f.QueueStats(); st.Stream.Messages != n {
		t.Fatalf("want the %d items still queued, got %d", n, st.Stream.Messages)
	}
}

// The plain progress lines (not a terminal) carry done/failed/total.
func TestProducerWaitPlainProgress(t *testing.T) {
	f := e2etest.SleepOnlyFleet(t, "concurrency: 2", "")
	const n = 12
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q,"ms":500}`))
	f.StartWorker("w1")
	r := f.Producer(nil, "enqueue", "--wait", "--kind", "sleep", path)
	if r.Code != 0 {
		t.Fatalf("want exit 0:\n%s", r)
	}
	if !regexp.MustCompile(`items done \(\d+ succeeded, \d+ failed\), [0-9.]+ items/s, ETA`).MatchString(r.Stderr) {
		t.Fatalf("no plain progress line on stderr:\n%s", r)
	}
	sum := e2etest.WaitSummary(t, r.Stdout)
	if sum["Total"] != fmt.Sprint(n) || sum["Succeeded"] != fmt.Sprint(n) || sum["Failed"] != "0" {
		t.Fatalf("summary %v", sum)
	}
}
