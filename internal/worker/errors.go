package worker

import "errors"

// Causes with which an item's context is cancelled.
var (
	errDraining    = errors.New("worker is shutting down")
	errGraceOver   = errors.New("shutdown grace period is over")
	errMessageLost = errors.New("message could not be kept alive within its ack wait")
	errLeaseLost   = errors.New("credential lease lost")
)
