package batchapi

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// A budget that covers 2 of a deadline batch's 6 requests (their most
// spend through the Batch API, at half price) does not keep the batch
// paused: the first provider batch holds those 2, the rest follows in
// provider batches of what the budget covers as it goes, and the batch
// ends paused for its budget only when not even one request fits; it
// never spends more than its budget.
func TestBudgetCutsProviderBatches(t *testing.T) {
	f := newFleetWith(t, fakeapi.ProviderOpenAI, fleetOptions{batchDelay: time.Second,
		pool: "prices:\n  gpt-4o-mini: {input: 0.15, output: 0.60}"})
	price := spend.Price{Input: 0.15, Output: 0.60}
	const n = 6
	var b strings.Builder
	var sum spend.Amount
	prefix := []spend.Amount{0}
	for i := range n {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"question %d [fake:output_tokens=20]"}]}`, i)
		fmt.Fprintf(&b, `{"custom_id":"req-%04d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, body)
		in, out, _ := provider.Ceiling([]byte(body), "/v1/chat/completions")
		sum += price.Ceiling(in, out)
		prefix = append(prefix, spend.Amount(math.Ceil(float64(sum)*0.5)))
	}
	path := filepath.Join(f.Dir, "budget.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	budget := prefix[2]
	if r := f.Producer(nil, "enqueue", "--kind", "llm", "--format", "openai-batch", "--batch", "cut", "--deadline", "24h",
		"--budget", budget.String(), path); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	f.StartWorker("w1")
	var s show
	f.waitFor("the batch done, or paused for its budget with its provider batches ended", 2*time.Minute, func() bool {
		s = f.show("cut")
		if s.State == "done" {
			return true
		}
		for _, pb := range s.ProviderBatches {
			if pb.State != "done" && pb.State != "staged" {
				return false
			}
		}
		return s.State == "paused"
	})
	if len(s.ProviderBatches) < 2 || s.ProviderBatches[0].Total != 2 || s.ProviderBatches[0].ID == "" {
		t.Errorf("provider batches %+v: want the first of the 2 requests the budget covers, the rest after", s.ProviderBatches)
	}
	if s.Spent > budget || s.Spent == 0 {
		t.Errorf("spent %v of a budget of %v", s.Spent, budget)
	}
	if s.State != "done" && (s.PausedReason != spend.ReasonBudget || budget-s.Spent >= prefix[1]) {
		t.Errorf("batch %s (%s) with %v left of %v: paused only when not even one request (%v) fits", s.State, s.PausedReason, budget-s.Spent, budget, prefix[1])
	}
	if st := f.resultsStored(); st != uint64(s.Done) || s.Done < 2 {
		t.Errorf("%d results stored, %d items done", st, s.Done)
	}
	t.Logf("%d provider batches; %d of %d items done; batch %s, spent %v of %v", len(s.ProviderBatches), s.Done, n, s.State, s.Spent, budget)
}
