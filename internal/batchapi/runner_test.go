package batchapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

var providers = []string{fakeapi.ProviderOpenAI, fakeapi.ProviderAnthropic}

// A deadline batch runs through the Batch API: split within the bounds
// (here 10 requests) into provider batches spread over both keys, each
// created once, polled to its end, and every item's result recorded once
// from its line: the API's reply as output, status 200, the key, via the
// provider batch. No item runs in real time.
func TestBatchRunsThroughBatchAPI(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("b1", e.items(25, func(i int) string { return fmt.Sprintf("question %d", i) }))
			r := e.runner(func(o *batchapi.Options) {
				o.Bounds = map[string]batchapi.Bounds{prov: {MaxRequests: 10, MaxBytes: 1 << 20}}
			})
			e.until(r, "every provider batch done", func() bool { return e.allDone("b1") })
			recs := e.records("b1")
			if len(recs) != 3 {
				t.Fatalf("%d records, want 3 (25 items, 10 a batch)", len(recs))
			}
			perKey := map[string]int{}
			vias := map[string]bool{}
			for _, p := range recs {
				perKey[p.Credential]++
				vias[p.ProviderID] = true
				if p.Succeeded != p.Items || p.RealTime != 0 || p.Items > 10 {
					t.Errorf("record %+v", p)
				}
			}
			if perKey["key-a"] == 0 || perKey["key-b"] == 0 {
				t.Errorf("provider batches per key: %v, want both keys used", perKey)
			}
			res := e.results("b1")
			if len(res) != 25 {
				t.Fatalf("%d results, want 25", len(res))
			}
			for id, r := range res {
				if r.Outcome != kftype.OutcomeSucceeded || r.StatusCode != 200 || !vias[r.Via] || r.CredentialID == "" || !json.Valid([]byte(r.Output)) {
					t.Errorf("%s: %+v", id, r)
				}
			}
			if got := e.created(); got != 3 {
				t.Errorf("the stand-in created %d provider batches, want 3", got)
			}
			st := e.api.Stats()
			for _, k := range st.Keys {
				if k.Requests != 0 {
					t.Errorf("%s: %d real-time requests, want none", k.Label, k.Requests)
				}
			}
			if st.BadRequests != 0 || st.Unauthorized != 0 {
				t.Errorf("the stand-in refused %d requests as bad, %d as unauthorized", st.BadRequests, st.Unauthorized)
			}
			// batch show: the provider batches, as the CLI and the dashboard
			// show them.
			row, err := batchview.Read(ctx(t), e.q, "b1")
			if err != nil || row.Deadline == nil || len(row.ProviderBatches) != 3 || row.State != batchview.StateDone {
				t.Fatalf("batch view: %+v %v", row, err)
			}
			ended := map[string]string{fakeapi.ProviderOpenAI: "completed", fakeapi.ProviderAnthropic: "ended"}[prov]
			total := int64(0)
			for _, pb := range row.ProviderBatches {
				total += pb.Total
				if !vias[pb.ID] || pb.Credential == "" || pb.Status != ended || pb.Completed != pb.Total || pb.Failed != 0 || pb.State != queue.PBDone {
					t.Errorf("provider batch row %+v", pb)
				}
			}
			if total != 25 {
				t.Errorf("the provider batches hold %d requests, want 25", total)
			}
			if rows, err := batchview.List(ctx(t), e.q); err != nil || len(rows) != 1 || len(rows[0].ProviderBatches) != 3 {
				t.Errorf("batch list: %+v %v", rows, err)
			}
			// The results read as the provider's own batch output.
			var b strings.Builder
			format := provider.FormatOpenAIBatch
			if prov == fakeapi.ProviderAnthropic {
				format = provider.FormatAnthropicBatch
			}
			if _, err := e.q.WriteResultsIn(ctx(t), "b1", format, &b); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(b.String(), "\n"); n != 25 {
				t.Errorf("%d result lines in %s", n, format)
			}
		})
	}
}

// A line that failed in a way a retry may cure (500) goes back to the
// real-time lanes (its own message ID, the batch's lane registered); a
// 4xx line fails its item as real time would: a dead letter and a failed
// result with the API's error body and status.
func TestLineFailures(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("b2", e.items(9, func(i int) string {
				switch i % 3 {
				case 1:
					return fmt.Sprintf("q%d [fake:status=500]", i)
				case 2:
					return fmt.Sprintf("q%d [fake:status=400]", i)
				}
				return fmt.Sprintf("q%d", i)
			}))
			r := e.runner(nil)
			e.until(r, "the provider batch done", func() bool { return e.allDone("b2") })
			res := e.results("b2")
			lane := e.laneItems("b2", e.model())
			rec := e.records("b2")[0]
			if rec.Succeeded != 3 || rec.FailedN != 3 || rec.RealTime != 3 {
				t.Errorf("record counts: %+v", rec)
			}
			dls := map[string]kftype.DeadLetter{}
			if err := e.q.ListDeadLetters(ctx(t), "b2", func(d kftype.DeadLetter) error { dls[d.Item] = d; return nil }); err != nil {
				t.Fatal(err)
			}
			for i := range 9 {
				id := fmt.Sprintf("item-%04d", i)
				r, has := res[id]
				switch i % 3 {
				case 0:
					if !has || r.Outcome != kftype.OutcomeSucceeded || r.Via != rec.ProviderID {
						t.Errorf("%s: %+v", id, r)
					}
				case 1:
					it, queued := lane[id]
					if has || !queued || it.Fallback != rec.ID || !strings.Contains(string(it.Payload), "[fake:status=500]") {
						t.Errorf("%s: result %v %+v, on the lane %v %+v", id, has, r, queued, it)
					}
				case 2:
					if !has || r.Outcome != kftype.OutcomeFailed || r.StatusCode != 400 || !strings.Contains(r.Output, "error") ||
						!strings.HasPrefix(r.Error, kftype.ReasonPermanent) || r.Via != rec.ProviderID {
						t.Errorf("%s: %+v", id, r)
					}
					d, ok := dls[id]
					if !ok || d.Reason != kftype.ReasonPermanent || !strings.Contains(string(d.Payload), "[fake:status=400]") {
						t.Errorf("%s: dead letter %v %+v", id, ok, d)
					}
				}
			}
			// The lane is registered: the batch's record names the scope.
			b, err := e.q.Batch(ctx(t), "b2")
			if err != nil || len(b.Scopes) != 1 || b.Scopes[0] != e.model() {
				t.Errorf("batch record %+v %v: want its scope %s registered", b, err, e.model())
			}
		})
	}
}

// A provider batch that expires, or fails (OpenAI: at validation;
// Anthropic: every request errored with api_error), sends its items to
// real time; what it finished before keeps its result.
func TestExpiredAndFailedBatchesGoRealTime(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov+"/expired", func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("b3", e.items(6, func(i int) string {
				if i < 3 {
					return fmt.Sprintf("q%d", i)
				}
				return fmt.Sprintf("q%d [fake:hold]", i)
			}))
			r := e.runner(nil)
			e.until(r, "the provider batch submitted", func() bool {
				ps := e.records("b3")
				return len(ps) == 1 && ps[0].State == queue.PBSubmitted
			})
			e.api.ExpireBatches()
			e.until(r, "the provider batch done", func() bool { return e.allDone("b3") })
			rec := e.records("b3")[0]
			if rec.Succeeded != 3 || rec.RealTime != 3 {
				t.Errorf("record: %+v", rec)
			}
			e.wantOnLane("b3", 3)
		})
		t.Run(prov+"/failed", func(t *testing.T) {
			e := newEnv(t, prov)
			e.api.FailNextBatches(1)
			e.enqueue("b4", e.items(4, func(i int) string { return fmt.Sprintf("q%d", i) }))
			r := e.runner(nil)
			e.until(r, "the provider batch done", func() bool { return e.allDone("b4") })
			rec := e.records("b4")[0]
			if rec.RealTime != 4 || len(e.results("b4")) != 0 {
				t.Errorf("record: %+v", rec)
			}
			e.wantOnLane("b4", 4)
		})
	}
}

// The size bound splits too: no provider batch's input passes MaxBytes,
// and the stand-in takes each (OpenAI: the file; Anthropic: the body).
func TestChunksWithinBytes(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			e := newEnv(t, prov)
			e.enqueue("s1", e.items(10, func(i int) string { return strings.Repeat("x", 100) + fmt.Sprint(i) }))
			const most = 700
			r := e.runner(func(o *batchapi.Options) {
				o.Bounds = map[string]batchapi.Bounds{prov: {MaxRequests: 1000, MaxBytes: most}}
			})
			e.until(r, "every provider batch done", func() bool { return e.allDone("s1") })
			recs, items := e.records("s1"), 0
			for _, p := range recs {
				items += p.Items
				if p.Bytes > most || p.Items == 0 {
					t.Errorf("record %s: %d items, %d bytes (at most %d)", p.ID, p.Items, p.Bytes, most)
				}
			}
			if items != 10 || len(recs) < 3 || len(e.results("s1")) != 10 {
				t.Errorf("%d records holding %d items, %d results", len(recs), items, len(e.results("s1")))
			}
		})
	}
}
