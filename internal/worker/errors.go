package worker

import "errors"

// Causes with which an item's context is cancelled.
var (
	errDraining    = errors.New("worker is shutting down")
	errGraceOver   = errors.New("shutdown grace period is over")
	errMessageLost = errors.New("message could not be kept alive within its ack wait")
	errLeaseLost   = errors.New("credential lease lost")
)

// errLaneWaiting: the item's lane has its share of slots waiting for a key
// (laneWaits) and no key has room for the item now; it goes back.
var errLaneWaiting = errors.New("its lane has its share of slots waiting for a key")
