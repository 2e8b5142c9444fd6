package queue

import "github.com/keyfleet/keyfleet/internal/kftype"

// The domain types moved to internal/kftype. These aliases keep the code
// that still names them here compiling while it moves: internal/batchapi
// and the e2e tests (being moved into packages of their own). Remove each
// once nothing names it.

// Deprecated: use kftype.Item.
type Item = kftype.Item

// Deprecated: use kftype.BatchInfo.
type BatchInfo = kftype.BatchInfo

// Deprecated: use kftype.Result.
type Result = kftype.Result

// Deprecated: use kftype.DeadLetter.
type DeadLetter = kftype.DeadLetter

// Deprecated: use kftype.DeadLetterSummary.
type DeadLetterSummary = kftype.DeadLetterSummary

// Deprecated: use the kftype constants of the same names.
const (
	BatchRunning   = kftype.BatchRunning
	BatchPaused    = kftype.BatchPaused
	BatchCancelled = kftype.BatchCancelled

	ActionPause  = kftype.ActionPause
	ActionResume = kftype.ActionResume
	ActionCancel = kftype.ActionCancel

	OutcomeSucceeded = kftype.OutcomeSucceeded
	OutcomeFailed    = kftype.OutcomeFailed
	OutcomeCancelled = kftype.OutcomeCancelled

	ReasonPermanent     = kftype.ReasonPermanent
	ReasonOutOfAttempts = kftype.ReasonOutOfAttempts
	ReasonRefused       = kftype.ReasonRefused
	ReasonRateLimited   = kftype.ReasonRateLimited
)

// Deprecated: use kftype.Lane.
func Lane(batch, scope string) string { return kftype.Lane(batch, scope) }
