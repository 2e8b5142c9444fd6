package dashboard

import (
	"reflect"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// A batch's row counts its items that ran on a fallback kind, each once
// by its latest result, and keeps its own kind (not the fallback's) for a
// batch without a record.
func TestTallyFallbacks(t *testing.T) {
	tl := newTally()
	at := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	moved := func(item, why string) kftype.Result {
		return kftype.Result{Batch: "b", Item: item, Kind: "chat-azure", Outcome: kftype.OutcomeSucceeded,
			FallbackFrom: "chat", FallbackReason: why, FinishedAt: at}
	}
	tl.result(moved("x", kftype.FallbackFailing))
	tl.result(moved("y", kftype.FallbackFailing))
	tl.result(moved("y", kftype.FallbackFailing)) // read again
	tl.result(moved("z", kftype.FallbackWaited))
	tl.result(kftype.Result{Batch: "b", Item: "w", Kind: "chat", Outcome: kftype.OutcomeSucceeded, FinishedAt: at})
	rows := tl.rows(at)
	if len(rows) != 1 {
		t.Fatalf("rows: %+v", rows)
	}
	want := []kftype.FallbackCount{
		{Kind: "chat", To: "chat-azure", Why: kftype.FallbackFailing, Items: 2},
		{Kind: "chat", To: "chat-azure", Why: kftype.FallbackWaited, Items: 1},
	}
	if r := rows[0]; !reflect.DeepEqual(r.Fallbacks, want) || r.Kind != "chat" || r.Done != 4 {
		t.Errorf("row: kind %q, done %d, fallbacks %+v; want chat, 4, %+v", r.Kind, r.Done, r.Fallbacks, want)
	}
}
