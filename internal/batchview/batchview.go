// Package batchview builds the view of a batch that `producer batch` and
// the dashboard show: its priority, weight, state and progress, counted
// from its record and its results. Front ends only format a Batch; the
// definition of a row and of its state is Row and State, here, so the CLI
// and the web page cannot disagree.
//
// The dashboard keeps its own streaming counts (it follows the results)
// and builds each row with Row; the CLI reads the record and the results
// once with Read or List.
package batchview

import (
	"context"
	"slices"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/spend"
)

// States of a Batch: the record's (kftype.BatchRunning, BatchPaused,
// BatchCancelled) and StateDone.
const (
	StateRunning   = string(kftype.BatchRunning)
	StatePaused    = string(kftype.BatchPaused)
	StateCancelled = string(kftype.BatchCancelled)
	// StateDone: every item has an outcome and the batch was not
	// cancelled.
	StateDone = "done"
)

// Batch is one batch's row: `batch show --json`'s object, an element of
// `batch list --json`, a row of the dashboard's /api/status "batches" and
// the object GET /api/batches/{id} answers. Keys may be added, never
// removed.
type Batch struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Scopes are the scopes its items have (pool.scope), each a lane of
	// its own; empty without scopes.
	Scopes []string `json:"scopes"`
	// Priority and Weight from the batch's record (the defaults without
	// one).
	Priority int `json:"priority"`
	Weight   int `json:"weight"`
	// State (see State): cancelled, done, paused or running.
	State string `json:"state"`
	// LastChange: the latest pause, resume or cancel (what, when, by
	// whom); null when none.
	LastChange *kftype.BatchEvent `json:"last_change"`
	// Total is the number of distinct items enqueued (the batch's record);
	// TotalKnown is false for a batch with results but no record (its
	// enqueue could not write one, or its items were published by other
	// means): Total is then Done.
	Total      int64 `json:"total"`
	TotalKnown bool  `json:"total_known"`
	// Done = Succeeded + Failed + Cancelled: items with an outcome, each
	// counted once by its latest outcome.
	Done      int64 `json:"done"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
	// Rate is items done per second: lately while the batch runs, over its
	// whole run once it is complete (0: unknown).
	Rate float64 `json:"rate"`
	// ETASeconds and ETA: when the rest will be done at Rate (null when
	// complete, unknown or stalled).
	ETASeconds *float64   `json:"eta_seconds"`
	ETA        *time.Time `json:"eta"`
	// Complete: every item enqueued has an outcome (the batch may have been
	// cancelled all the same: see State).
	Complete     bool       `json:"complete"`
	EnqueuedAt   *time.Time `json:"enqueued_at"`
	LastResultAt *time.Time `json:"last_result_at"`
	// History lists the operators' changes of state (pause, resume,
	// cancel): when, what, by whom (user@host); [] when none.
	History []kftype.BatchEvent `json:"history"`
	// Deadline: the batch runs through its provider's Batch API and must
	// be done by then (null: it runs in real time).
	Deadline *time.Time `json:"deadline"`
	// ProviderBatches are the provider batches (Batch API) its items run
	// in, oldest first; [] when none.
	ProviderBatches []ProviderBatch `json:"provider_batches"`
	// Tenant is the team it belongs to ("" none).
	Tenant string `json:"tenant"`
	// Budget bounds what it spends (null: none); Spent is what it spent
	// so far, fleet-wide (the spend ledger's, with Spend; else what its
	// results say).
	Budget *spend.Amount `json:"budget"`
	Spent  spend.Amount  `json:"spent"`
	// PausedReason says why it is paused: "" (an operator), budget or
	// tenant-budget.
	PausedReason string `json:"paused_reason"`
	// Fallbacks count its items that ran on a fallback kind of their
	// kind, by that kind and why (waited, failing), each item once by its
	// latest result; [] when none.
	Fallbacks []kftype.FallbackCount `json:"fallbacks"`
}

// ProviderBatch is one provider batch of a batch: what `batch show`
// lists and the dashboard shows.
type ProviderBatch struct {
	// ID is the provider's batch ID ("" until it is created).
	ID string `json:"id"`
	// Record is keyfleet's record of it (the provider batch's metadata
	// keyfleet_record, where the provider takes metadata).
	Record     string `json:"record"`
	Provider   string `json:"provider"`
	Credential string `json:"credential"`
	// Status is the provider's status as last polled (OpenAI's
	// validating ... completed, Anthropic's in_progress, canceling,
	// ended); before it is created, keyfleet's state (staged, creating).
	Status string `json:"status"`
	// State is keyfleet's: staged, creating, submitted, cancelling, late
	// (cancelled for the deadline, not ended within half the margin: its
	// items went to real time), collecting, fallback, done.
	State string `json:"state"`
	// Total is its requests; Completed and Failed the provider's counts.
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// RealTime: its items sent to real time (expired, failed in a way a
	// retry may cure, past the deadline) once it ended.
	RealTime int `json:"real_time"`
	// SpentTwice: requests the provider finished after their items had
	// gone to real time (late): paid twice, recorded once.
	SpentTwice int `json:"spent_twice"`
	// Cancel says why keyfleet cancelled it at the provider ("deadline",
	// "batch"; "" when it did not).
	Cancel    string     `json:"cancel,omitempty"`
	CreatedAt *time.Time `json:"created_at"`
	EndedAt   *time.Time `json:"ended_at"`
}

// providerStatuses are the statuses a ProviderBatch shows: the
// providers' (OpenAI's Batch.status, Anthropic's processing_status) and
// keyfleet's states before creation.
var providerStatuses = []string{
	"validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled",
	"canceling", "ended",
	queue.PBStaged, queue.PBCreating, queue.PBFallback, queue.PBDone,
}

// ProviderBatches are the rows of a batch's provider batch records, in
// their order.
func ProviderBatches(recs []queue.ProviderBatch) []ProviderBatch {
	out := make([]ProviderBatch, 0, len(recs))
	for _, p := range recs {
		status := p.Status
		if status == "" {
			status = p.State
		}
		if !slices.Contains(providerStatuses, status) {
			status = "other" // a word the view does not know: no API text reaches a page
		}
		out = append(out, ProviderBatch{ID: p.ProviderID, Record: p.ID, Provider: p.Provider, Credential: p.Credential,
			Status: status, State: p.State, Total: int64(p.Items), Completed: p.Completed, Failed: p.Failed,
			RealTime: p.RealTime, SpentTwice: p.SpentTwice, Cancel: p.Cancel, CreatedAt: timePtr(p.CreatedAt), EndedAt: timePtr(p.EndedAt)})
	}
	return out
}

// Tally is what a batch's results say: its items counted once each by
// their latest outcome.
type Tally struct {
	Succeeded, Failed, Cancelled int64
	// Spent is what the results say their runs cost.
	Spent spend.Amount
	// Fallbacks count the items that ran on a fallback kind (nil: none).
	Fallbacks []kftype.FallbackCount
	// Kind of the results (for a batch without a record).
	Kind string
	// First and Last are the earliest and latest finish times seen.
	First, Last time.Time
}

// Done is the number of items with an outcome.
func (t Tally) Done() int64 { return t.Succeeded + t.Failed + t.Cancelled }

// State is a batch's state as shown, from its record (known: it has one)
// and its results: "cancelled" when an operator cancelled it; else "done"
// once every item enqueued has an outcome; else "paused" when an operator
// paused it; else "running". A batch without a record is "running".
func State(rec kftype.BatchInfo, known bool, t Tally) string {
	switch {
	case !known:
		return StateRunning
	case rec.State == kftype.BatchCancelled:
		return StateCancelled
	case t.Done() >= rec.Total:
		return StateDone
	case rec.State == kftype.BatchPaused:
		return StatePaused
	}
	return StateRunning
}

// Row is batch id's row from its record (known: it has one) and the tally
// of its results. Rate and ETA are the caller's (SetRate): how a rate is
// taken depends on whether it follows the results or reads them once.
func Row(id string, rec kftype.BatchInfo, known bool, t Tally) Batch {
	row := Batch{ID: id, Kind: t.Kind, TotalKnown: known, Succeeded: t.Succeeded, Failed: t.Failed, Cancelled: t.Cancelled,
		Priority: kftype.PriorityDefault, Weight: kftype.WeightDefault, History: []kftype.BatchEvent{}, Scopes: append([]string{}, rec.Scopes...),
		Deadline: timePtr(rec.Deadline), ProviderBatches: []ProviderBatch{}, Spent: t.Spent,
		Fallbacks: append([]kftype.FallbackCount{}, t.Fallbacks...)}
	row.Done = t.Done()
	row.Total = row.Done
	if known {
		row.Kind, row.Total, row.EnqueuedAt = rec.Kinds.String(), rec.Total, timePtr(rec.EnqueuedAt)
		row.Priority, row.Weight = rec.Priority, rec.Weight
		if n := len(rec.History); n > 0 {
			row.History = rec.History
			row.LastChange = &rec.History[n-1]
		}
	}
	row.LastResultAt = timePtr(t.Last)
	row.Complete = known && row.Done >= row.Total
	row.State = State(rec, known, t)
	row.Tenant, row.Budget = rec.Tenant, rec.Budget
	if row.State == StatePaused {
		row.PausedReason = rec.PausedReason
	}
	return row
}

// Spend sets each row's Spent from the ledger (what every run of the
// batch cost, fleet-wide, its reservations' lapsed ones included), where
// the ledger holds more than the row's results say.
func Spend(ctx context.Context, l *spend.Ledger, rows []Batch) error {
	for i := range rows {
		b, _, err := l.Read(ctx, rows[i].ID, "", "")
		if err != nil {
			return err
		}
		rows[i].Spent = max(rows[i].Spent, b.Spent)
	}
	return nil
}

// SetRate sets the row's Rate and, while items are left, its ETA at now.
func (b *Batch) SetRate(rate float64, now time.Time) {
	b.Rate = rate
	b.ETASeconds, b.ETA = nil, nil
	if b.Complete || !b.TotalKnown || rate <= 0 || b.State == StateCancelled {
		return
	}
	secs := float64(b.Total-b.Done) / rate
	eta := now.Add(time.Duration(secs * float64(time.Second))).UTC()
	b.ETASeconds, b.ETA = &secs, &eta
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
