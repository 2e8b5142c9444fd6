package queue

import "github.com/keyfleet/keyfleet/internal/kftype"

// The domain types moved to internal/kftype. These aliases keep the
// packages that still name them here compiling while they move.

// Deprecated: use kftype.Item.
type Item = kftype.Item

// Deprecated: use kftype.BatchInfo.
type BatchInfo = kftype.BatchInfo

// Deprecated: use kftype.BatchEvent.
type BatchEvent = kftype.BatchEvent

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

	PriorityFirst   = kftype.PriorityFirst
	PriorityLast    = kftype.PriorityLast
	PriorityDefault = kftype.PriorityDefault
	WeightMin       = kftype.WeightMin
	WeightMax       = kftype.WeightMax
	WeightDefault   = kftype.WeightDefault

	ReasonPermanent     = kftype.ReasonPermanent
	ReasonOutOfAttempts = kftype.ReasonOutOfAttempts
	ReasonMaxDeliveries = kftype.ReasonMaxDeliveries
	ReasonUndecodable   = kftype.ReasonUndecodable
	ReasonUnknownKind   = kftype.ReasonUnknownKind
	ReasonRefused       = kftype.ReasonRefused
	ReasonRateLimited   = kftype.ReasonRateLimited
)

// Deprecated: use kftype.Lane.
func Lane(batch, scope string) string { return kftype.Lane(batch, scope) }

// Deprecated: use kftype.LaneParts.
func LaneParts(lane string) (batch, scope string) { return kftype.LaneParts(lane) }
