package kftype

import "time"

// Outcome is how an item ended: OutcomeSucceeded, OutcomeFailed or
// OutcomeCancelled. It is an alias of string while internal/batchapi
// builds its results from plain strings; a defined type once it does not.
type Outcome = string

// Outcomes of an item (Result.Outcome).
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	// OutcomeCancelled: the item's batch was cancelled before it ran.
	OutcomeCancelled Outcome = "cancelled"
)

// Result is the final outcome of one item: one JSON line of `producer
// results`. The results stream keeps the latest per item, so a batch's
// progress counts each item exactly once even when it ran twice.
type Result struct {
	Item    string  `json:"item"`
	Batch   string  `json:"batch"`
	Kind    string  `json:"kind"`
	Outcome Outcome `json:"outcome"`
	// Attempts is the number of runs (KEYFLEET_ATTEMPT of the last run).
	Attempts int `json:"attempts"`
	// Duration of the last run, in seconds.
	Duration     float64 `json:"duration"`
	CredentialID string  `json:"credential_id"`
	// LeasedAt is when the last run's credential lease was granted, on
	// Redis's clock (the moment the pool counted the start).
	LeasedAt time.Time `json:"leased_at,omitzero"`
	Error    string    `json:"error"`
	// Output is the job's output (exec stdout, http body), at most the
	// worker's jobs.max_output bytes; base64 when OutputEncoding says so.
	Output          string `json:"output"`
	OutputEncoding  string `json:"output_encoding,omitempty"` // "" (UTF-8 text) or "base64"
	OutputTruncated bool   `json:"output_truncated"`
	// StatusCode is the HTTP status of the item's last API reply (http
	// and provider kinds; 0, left out, when it got none); RequestID the
	// API's ID of that request, from its reply's headers.
	StatusCode int    `json:"status_code,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
	// Via names the provider batch the item ran in (a Batch API's batch
	// ID); "" when it ran on its own.
	Via string `json:"via,omitempty"`
	// Spend is what the run cost at its model's price (pool.prices), from
	// its reply's usage (0, left out, when unknown).
	Spend Amount `json:"spend,omitempty"`
	// FallbackFrom is the item's own kind when it ran on one of that
	// kind's fallback kinds (Kind), FallbackReason why it moved
	// (FallbackWaited, FallbackFailing); "" (left out) when it ran on its
	// own.
	FallbackFrom   string    `json:"fallback_from,omitempty"`
	FallbackReason string    `json:"fallback_reason,omitempty"`
	Worker         string    `json:"worker"`
	FinishedAt     time.Time `json:"finished_at"`
}
