package worker

import "errors"

// Causes with which an item's context is cancelled.
var (
	errDraining    = errors.New("worker is shutting down")
	errGraceOver   = errors.New("shutdown grace period is over")
	errMessageLost = errors.New("message could not be kept alive within its ack wait")
	errLeaseLost   = errors.New("credential lease lost")
)

// errClassWaiting: items of the item's class (its keys and scope) have
// their share of slots waiting for a key (classWaits) and no key has room
// for the item now; it goes back.
var errClassWaiting = errors.New("items of its keys and scope have their share of slots waiting for a key")
