package dashboard_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchview"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// A deadline batch's provider batches show on the dashboard: in
// /api/status's batches and GET /api/batches/{id} (batch show --json's
// object), each with its provider ID, key, status and counts; a status
// the view does not know shows as "other" (no API text on the page).
func TestProviderBatchesShown(t *testing.T) {
	e := newEnv(t)
	deadline := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	if _, err := e.q.AddToBatch(e.ctx, "later", "chat", 7, queue.WithDeadline(deadline, "openai")); err != nil {
		t.Fatal(err)
	}
	store, err := e.q.OpenProviderBatches(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []queue.ProviderBatch{
		{ID: "pb-1", Batch: "later", Kind: "chat", Provider: "openai", Credential: "key-a", State: queue.PBSubmitted,
			ProviderID: "batch_abc", Status: "in_progress", Items: 5, Completed: 2, Failed: 1, CreatedAt: time.Now()},
		{ID: "pb-2", Batch: "later", Kind: "chat", Provider: "openai", Credential: "key-b", State: queue.PBSubmitted,
			ProviderID: "batch_def", Status: "<b>odd</b>", Items: 2, CreatedAt: time.Now().Add(time.Second)},
	} {
		if err := store.Create(e.ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	base := e.startDashboard("")
	var row batchview.Batch
	testutil.WaitFor(t, "the provider batches in the batch's row", 10*time.Second, func() bool {
		resp, err := http.Get(base + "/api/batches/later")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		row = batchview.Batch{}
		return json.NewDecoder(resp.Body).Decode(&row) == nil && len(row.ProviderBatches) == 2
	})
	a, b := row.ProviderBatches[0], row.ProviderBatches[1]
	if a.ID != "batch_abc" || a.Credential != "key-a" || a.Status != "in_progress" || a.Total != 5 || a.Completed != 2 || a.Failed != 1 {
		t.Errorf("first provider batch: %+v", a)
	}
	if b.ID != "batch_def" || b.Status != "other" {
		t.Errorf("second provider batch: %+v", b)
	}
	if row.Deadline == nil || !row.Deadline.Equal(deadline) {
		t.Errorf("deadline %v, want %s", row.Deadline, deadline)
	}
	resp, err := http.Get(base + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Batches []batchview.Batch }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Batches) != 1 || len(st.Batches[0].ProviderBatches) != 2 {
		t.Errorf("/api/status batches: %+v %v", st.Batches, err)
	}
}
