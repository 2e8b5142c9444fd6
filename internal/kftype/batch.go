package kftype

import "time"

// BatchInfo is a batch's record, written by enqueue: how many distinct
// items the batch holds, so that its progress can be shown without the
// input file, and how an operator steers it. The results stream says how
// many are done.
type BatchInfo struct {
	ID string `json:"id"`
	// Kinds of its items: every kind it was enqueued with.
	Kinds Kinds `json:"kind"`
	// Scopes are the scopes its items have (pool.scope), sorted; each is a
	// lane of its own (Lanes). Items without a scope have the batch's
	// first lane.
	Scopes []string `json:"scopes,omitempty"`
	// Total counts the items the server stored as new: an item enqueued
	// again inside the duplicate window is a duplicate and adds nothing,
	// so a batch enqueued in several runs adds up correctly.
	Total int64 `json:"total"`
	// EnqueuedAt is the first enqueue's time, UpdatedAt the last one that
	// added items.
	EnqueuedAt time.Time `json:"enqueued_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Priority orders batches: PriorityFirst (1) first, PriorityLast (5)
	// last. Weight shares the keys among batches of one priority. The
	// first enqueue sets them (PriorityDefault and WeightDefault unless
	// it gives others).
	Priority int `json:"priority"`
	Weight   int `json:"weight"`
	// State is what an operator (or a budget) made of the batch:
	// BatchRunning, BatchPaused or BatchCancelled. Whether it is done is
	// not recorded: its results say so.
	State BatchState `json:"state"`
	// History records each change of state: what, when, by whom.
	History []BatchEvent `json:"history,omitempty"`
	// PausedReason says why a paused batch is paused: "" (an operator),
	// spend.ReasonBudget or spend.ReasonTenantBudget (its budget, or its
	// tenant's of the period, cannot cover its next start).
	PausedReason string `json:"paused_reason,omitempty"`
	// Tenant is the team the batch belongs to ("" none): tenants share the
	// keys by weight before their batches do.
	Tenant string `json:"tenant,omitempty"`
	// Budget bounds what the batch spends, fleet-wide (nil: none); the
	// ledger in Redis (spend.Ledger) holds it and what is spent.
	Budget *Amount `json:"budget,omitempty"`
	// Deadline, when set, is when the batch's items enqueued with a
	// deadline must be done by: they run through the provider's Batch
	// API (internal/batchapi), and those not back by the deadline less
	// jobs.batch_api.margin run in real time. The earliest deadline of
	// the batch's enqueues.
	Deadline time.Time `json:"deadline,omitzero"`
	// Provider is the Batch API's provider (openai, anthropic) of a batch
	// with a deadline.
	Provider string `json:"provider,omitempty"`
	// Rev is the record's revision in the bucket (not stored): every
	// change has a higher one.
	Rev uint64 `json:"-"`
	// Deleted (not stored): a watch saw the record deleted (the batch
	// holds nothing any more); only ID and Rev are set.
	Deleted bool `json:"-"`
}

// LastChange is the latest moment the record changed: an enqueue that
// added items, or a change of state.
func (b BatchInfo) LastChange() time.Time {
	t := b.UpdatedAt
	if b.EnqueuedAt.After(t) {
		t = b.EnqueuedAt
	}
	if n := len(b.History); n > 0 && b.History[n-1].At.After(t) {
		t = b.History[n-1].At
	}
	return t
}

// BatchState is what an operator, or a budget, made of a batch.
type BatchState string

// States of a batch (BatchInfo.State).
const (
	BatchRunning   BatchState = "running"
	BatchPaused    BatchState = "paused"
	BatchCancelled BatchState = "cancelled"
)

// Actions on a batch (BatchEvent.Action): each moves it to a state.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionCancel = "cancel"
)

// BatchEvent is one change of a batch's state.
type BatchEvent struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"` // ActionPause, ActionResume, ActionCancel
	By     string    `json:"by"`     // user@host of the command, or the API's caller
	// Reason is why a pause (or the resume that undid it) that no
	// operator made was made: budget, tenant-budget ("" for an
	// operator's).
	Reason string `json:"reason,omitempty"`
}

// Priorities and weights of a batch. A batch's priority is its items'
// place among the pool's waiters, so its range is the pool's
// (creds.PriorityFirst..PriorityLast: a test holds them equal).
const (
	PriorityFirst   = 1
	PriorityLast    = 5
	PriorityDefault = 3
	WeightMin       = 1
	WeightMax       = 1000
	WeightDefault   = 1
)
