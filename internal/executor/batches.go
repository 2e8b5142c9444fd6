package executor

import (
	"context"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Batches is the worker's view of the batches, as the bucket's watch
// delivers their records.
type Batches interface {
	// State is a batch's state (running when unknown) and priority.
	State(batch string) (state kftype.BatchState, priority int)
	// Poke tells the puller that something changed: a class that was full
	// has a slot free again (ClassWaits), so its lanes may be pulled.
	Poke()
}

// Host is what the worker keeps for the whole process.
type Host interface {
	// RedisUp records whether Redis answered the executor's last call
	// (the worker's readiness says "Redis unreachable" while it does not).
	RedisUp(ok bool)
	// Register syncs the configured credentials into the pool again: the
	// pool said it is empty (Redis lost its state).
	Register(ctx context.Context) error
}
