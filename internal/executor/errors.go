package executor

import "errors"

// Causes with which an item's context is cancelled, and why an item is
// handed back (Outcome.Cause).
var (
	// ErrDraining: the worker stops taking work (the first signal); the
	// worker cancels its pull context with it.
	ErrDraining = errors.New("worker is shutting down")
	// ErrGraceOver: worker.shutdown_grace is over; the worker cancels its
	// run context with it and running jobs are cancelled.
	ErrGraceOver = errors.New("shutdown grace period is over")
	// ErrMessageLost: no in-progress ack was confirmed within the ack
	// wait; another worker may hold the message now.
	ErrMessageLost = errors.New("message could not be kept alive within its ack wait")
	// ErrLeaseLost: the credential lease could not be renewed.
	ErrLeaseLost = errors.New("credential lease lost")
	// ErrClassWaiting: items of the item's class (its keys and scope)
	// have their share of slots waiting for a key (ClassWaits) and no key
	// has room for the item now; it goes back.
	ErrClassWaiting = errors.New("items of its keys and scope have their share of slots waiting for a key")
	// ErrPaused: the item's batch is paused; it goes back to its lane.
	ErrPaused = errors.New("the batch is paused")
	// ErrRefusedBefore: the only key granted refused the item before.
	ErrRefusedBefore = errors.New("the granted key refused this item before")
	// ErrRunLog: the run could not be counted (Redis failed right after
	// the grant); nothing ran.
	ErrRunLog = errors.New("the run could not be counted")
	// ErrResultNotStored: a result or dead letter could not be stored
	// within the settle deadline; the item runs again.
	ErrResultNotStored = errors.New("the item's record could not be stored")
	// ErrAckNotConfirmed: the result is stored but the acknowledgement was
	// not confirmed; the message comes back after its ack wait.
	ErrAckNotConfirmed = errors.New("the acknowledgement was not confirmed")
	// ErrCancelNotRecorded: a cancelled batch's item could not be recorded
	// as cancelled; the message comes back after its ack wait.
	ErrCancelNotRecorded = errors.New("the cancelled item could not be recorded")
)
