package executor

import (
	"context"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// Recorder stores what becomes of items; the worker's adapter over
// *queue.Queue and *queue.Committer satisfies it.
type Recorder interface {
	// Commit stores a succeeded item's result, then acknowledges its
	// delivery, with other items' at once (a group commit). Its error
	// wraps queue.ErrResultNotStored (nothing acknowledged) or
	// queue.ErrAckNotConfirmed (the result is stored).
	Commit(ctx context.Context, r queue.Result, d Delivery) error
	// PutResult stores a result (it replaces the item's earlier one).
	PutResult(ctx context.Context, r queue.Result) error
	// PutDeadLetter stores a dead letter.
	PutDeadLetter(ctx context.Context, dl queue.DeadLetter) error
	// CancelItem records an item of a cancelled batch that never ran as
	// cancelled (unless it has a result) and terminates its delivery.
	CancelItem(ctx context.Context, d Delivery, it queue.Item, by string) (bool, error)
}
