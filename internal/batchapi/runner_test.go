package batchapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/batchapi"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
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
				if r.Outcome != queue.OutcomeSucceeded || r.StatusCode != 200 || !vias[r.Via] || r.CredentialID == "" || !json.Valid([]byte(r.Output)) {
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
