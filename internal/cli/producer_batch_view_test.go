package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/itemview"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// batch show's text says what binds a batch (its tenant, its budget and
// what it spent, why it is paused) and what runs it through a Batch API
// (its deadline, one line per provider batch); API text in it is made
// safe for a terminal.
func TestPrintBatchShowsSpendAndProviderBatches(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	budget, _ := spend.ParseAmount("25")
	spent, _ := spend.ParseAmount("24.9925")
	deadline := now.Add(3 * time.Hour)
	b := batchview.Batch{ID: "docs", Kind: "chat", Priority: 3, Weight: 1, State: batchview.StatePaused, PausedReason: spend.ReasonBudget,
		Total: 10, TotalKnown: true, Done: 4, Succeeded: 4, Tenant: "research", Budget: &budget, Spent: spent, Deadline: &deadline,
		History: []kftype.BatchEvent{{At: now, Action: kftype.ActionPause, By: "keyfleet worker w1", Reason: spend.ReasonBudget}},
		ProviderBatches: []batchview.ProviderBatch{
			{ID: "batch_abc", Record: "r1", Provider: "openai", Credential: "k1", Status: "in_progress", Total: 6, Completed: 2},
			{Record: "r2", Provider: "openai", Credential: "k2\x1b[31m", Status: "staged", Total: 3, Cancel: "deadline"},
		}}
	var out bytes.Buffer
	printBatch(&out, b, now)
	text := out.String()
	for _, want := range []string{
		"paused (budget)", "research", "24.9925 of a budget of 25", "Deadline:", "in 3h0m0s",
		"Provider batches:", "SPENT TWICE", "batch_abc", "2/6", "(r2)", "for the deadline", "pause  by keyfleet worker w1 (budget)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("batch show lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b") {
		t.Errorf("batch show passes a control character to the terminal:\n%q", text)
	}
}

// item show names the provider batch an item runs in.
func TestStateTextOfAnItemInAProviderBatch(t *testing.T) {
	it := itemview.Item{State: itemview.StateBatchAPI,
		ProviderBatch: &batchview.ProviderBatch{ID: "msgbatch_1", Provider: "anthropic", Credential: "k3", Status: "in_progress"}}
	if got, want := stateText(it), "in a provider batch (msgbatch_1, anthropic on key k3: in_progress)"; got != want {
		t.Errorf("stateText: %q, want %q", got, want)
	}
}
