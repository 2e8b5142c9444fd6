package batchapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

var providers = []string{fakeapi.ProviderOpenAI, fakeapi.ProviderAnthropic}

// twoModels alternates between two of the provider's models: a provider
// batch holds one model's requests, so the batch makes two.
func twoModels(prov string) func(int) string {
	m := map[string][2]string{fakeapi.ProviderOpenAI: {"gpt-4o-mini", "gpt-4o"},
		fakeapi.ProviderAnthropic: {"claude-sonnet-4-6", "claude-haiku-4-5"}}[prov]
	return func(i int) string { return m[i%2] }
}

// A provider's batch file enqueued with --deadline runs through the
// stand-in's Batch API: --wait ends with every item succeeded; every
// item's result exists exactly once, in the provider's own format too;
// at least 95% (here all) came via a provider batch, none as a real-time
// request; batch show --json lists the provider batches, created once
// each and spread over both keys. A deadline in the past, or on a kind
// without a Batch API, is refused (exit 2).
func TestBatchFileRunsThroughBatchAPI(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, prov, time.Second)
			f.StartWorker("w1")
			f.StartWorker("w2")
			const n = 300
			path := f.batchFile(n, twoModels(prov), func(i int) string { return fmt.Sprintf("Summarise item %d.", i) })
			r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", f.format(), "--batch", "nightly", "--deadline", "24h", "--wait", path)
			if r.Code != 0 {
				t.Fatalf("enqueue --wait:\n%s", r)
			}
			res := f.WaitResults("nightly", n, time.Minute)
			via := 0
			for id, r := range res {
				if r.Outcome != kftype.OutcomeSucceeded || r.StatusCode != 200 || r.Output == "" {
					t.Errorf("%s: %+v", id, r)
				}
				if r.Via != "" {
					via++
				}
			}
			if via*100 < n*95 {
				t.Errorf("%d of %d items via the Batch API, want at least 95%%", via, n)
			}
			out := f.Producer(nil, "results", "--batch", "nightly", "--format", f.format())
			if out.Code != 0 {
				t.Fatalf("results:\n%s", out)
			}
			seen := map[string]int{}
			for _, l := range e2etest.ParseJSONLines(t, out.Stdout) {
				id, _ := l["custom_id"].(string)
				seen[id]++
				if prov == fakeapi.ProviderAnthropic {
					if res, _ := l["result"].(map[string]any); res["type"] != "succeeded" {
						t.Errorf("%s: %v", id, l)
					}
				} else if resp, _ := l["response"].(map[string]any); resp["status_code"] != float64(200) {
					t.Errorf("%s: %v", id, l)
				}
			}
			if len(seen) != n {
				t.Errorf("%d items in the results, want %d", len(seen), n)
			}
			for id, c := range seen {
				if c != 1 {
					t.Errorf("%s: %d result lines", id, c)
				}
			}
			s := f.show("nightly")
			keys := map[string]bool{}
			for _, pb := range s.ProviderBatches {
				keys[pb.Credential] = true
				if pb.ID == "" || pb.State != queue.PBDone || pb.Completed != pb.Total || pb.Total != n/2 {
					t.Errorf("provider batch %+v", pb)
				}
			}
			if len(s.ProviderBatches) != 2 || len(keys) != 2 || s.Deadline == nil || s.State != "done" || s.Succeeded != n {
				t.Errorf("batch show: %+v", s)
			}
			if c := f.created(); c != 2 {
				t.Errorf("%d provider batches created, want 2", c)
			}
			if rt := f.realTime(); rt != 0 {
				t.Errorf("%d real-time requests, want none", rt)
			}
			for _, bad := range []string{"2020-01-01T00:00:00Z", "-1h"} {
				if r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", f.format(), "--batch", "late", "--deadline", bad, path); r.Code != 2 {
					t.Errorf("--deadline %s: want exit 2\n%s", bad, r)
				}
			}
		})
	}
}

// The deadline holds whatever the provider does: a provider batch that
// expires, and one whose every line failed with a 500 (Anthropic: each
// request errored with api_error; OpenAI: the batch failed), have their
// items finished in real time, long before the deadline.
func TestProviderFailuresFinishInRealTime(t *testing.T) {
	for _, prov := range providers {
		for _, how := range []string{"expired", "failed"} {
			t.Run(prov+"/"+how, func(t *testing.T) {
				t.Parallel()
				delay := time.Hour // expired: it would not end before then
				if how == "failed" {
					delay = time.Second // its requests fail as they are run
				}
				f := newFleet(t, prov, delay)
				if how == "failed" {
					f.api.FailNextBatches(1)
				}
				f.StartWorker("w1")
				const n = 20
				f.enqueue("flaky", f.batchFile(n, f.model, func(i int) string { return fmt.Sprintf("q %d", i) }), "24h")
				if how == "expired" {
					f.waitFor("the provider batch running", time.Minute, func() bool {
						ps := f.records("flaky")
						return len(ps) == 1 && ps[0].State == queue.PBSubmitted
					})
					f.api.ExpireBatches()
				}
				start := time.Now()
				res := f.WaitResults("flaky", n, time.Minute)
				for id, r := range res {
					if r.Outcome != kftype.OutcomeSucceeded || r.Via != "" {
						t.Errorf("%s: %+v, want succeeded in real time", id, r)
					}
				}
				if rt := f.realTime(); rt < n {
					t.Errorf("%d real-time requests, want %d", rt, n)
				}
				s := f.show("flaky")
				if len(s.ProviderBatches) != 1 || s.ProviderBatches[0].RealTime != n {
					t.Errorf("batch show: %+v", s)
				}
				t.Logf("%s: every item back in real time %s after the provider's end; deadline in 24 h", how, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// SIGKILL of every worker mid-way, twice (while items are staged into
// provider batches, and while the provider batches run): the workers
// started next take over; no provider batch is created twice, and every
// item gets one result, stored once.
func TestKillEveryWorkerMidway(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, prov, 15*time.Second)
			w := []*e2etest.Process{f.StartWorker("w1"), f.StartWorker("w2")}
			const n = 400
			f.enqueue("kill", f.batchFile(n, twoModels(prov), func(i int) string { return fmt.Sprintf("q %d", i) }), "24h")
			f.waitFor("a provider batch record", time.Minute, func() bool { return len(f.records("kill")) > 0 })
			f.killOutsideCreating("kill", w)
			w = []*e2etest.Process{f.StartWorker("w3"), f.StartWorker("w4")}
			f.waitFor("both provider batches created", 2*time.Minute, func() bool {
				ps := f.records("kill")
				return len(ps) == 2 && ps[0].ProviderID != "" && ps[1].ProviderID != ""
			})
			if ps := f.records("kill"); ps[0].State != queue.PBSubmitted && ps[1].State != queue.PBSubmitted {
				t.Fatalf("neither provider batch runs any more: %+v", ps) // the kill below would test nothing
			}
			for _, p := range w {
				kill(t, p)
			}
			w = []*e2etest.Process{f.StartWorker("w5"), f.StartWorker("w6")}
			res := f.WaitResults("kill", n, 2*time.Minute)
			for id, r := range res {
				if r.Outcome != kftype.OutcomeSucceeded || r.Via == "" {
					t.Errorf("%s: %+v", id, r)
				}
			}
			if c := f.created(); c != 2 {
				t.Errorf("%d provider batches created, want 2", c)
			}
			if st := f.resultsStored(); st != n {
				t.Errorf("the results stream stored %d results for %d items", st, n)
			}
			f.waitFor("every record done", time.Minute, func() bool {
				for _, p := range f.records("kill") {
					if p.Active() {
						return false
					}
				}
				return true
			})
			for _, p := range w {
				e2etest.StopWorkers(t, 30*time.Second, p)
			}
		})
	}
}

// batch cancel cancels the provider batches at the provider: their items
// not done are reported cancelled, nothing runs in real time.
func TestCancelCancelsAtProvider(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, prov, time.Hour)
			f.StartWorker("w1")
			const n = 10
			f.enqueue("stop", f.batchFile(n, f.model, func(i int) string { return fmt.Sprintf("q %d", i) }), "24h")
			f.waitFor("the provider batch running", time.Minute, func() bool {
				ps := f.records("stop")
				return len(ps) == 1 && ps[0].State == queue.PBSubmitted
			})
			if r := f.Producer(nil, "batch", "cancel", "stop", "--yes"); r.Code != 0 {
				t.Fatalf("batch cancel:\n%s", r)
			}
			res := f.WaitResults("stop", n, time.Minute)
			for id, r := range res {
				if r.Outcome != kftype.OutcomeCancelled {
					t.Errorf("%s: %+v", id, r)
				}
			}
			if c := f.cancels(); c != 1 {
				t.Errorf("%d cancels at the provider, want 1", c)
			}
			if rt := f.realTime(); rt != 0 {
				t.Errorf("%d real-time requests, want none", rt)
			}
			s := f.show("stop")
			if s.State != "cancelled" || s.Cancelled != n || len(s.ProviderBatches) != 1 ||
				!strings.Contains("cancelled ended", s.ProviderBatches[0].Status) {
				t.Errorf("batch show: %+v", s)
			}
		})
	}
}
