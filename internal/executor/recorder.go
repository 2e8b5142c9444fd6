package executor

import (
	"context"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Recorder stores what becomes of items; the worker's adapter over
// *queue.Queue and *queue.Committer satisfies it.
type Recorder interface {
	// Commit stores a succeeded item's result, then acknowledges its
	// delivery, with other items' at once (a group commit). Its error
	// wraps queue.ErrResultNotStored (nothing acknowledged) or
	// queue.ErrAckNotConfirmed (the result is stored).
	Commit(ctx context.Context, r kftype.Result, d Delivery) error
	// PutResult stores a result (it replaces the item's earlier one).
	PutResult(ctx context.Context, r kftype.Result) error
	// PutDeadLetter stores a dead letter.
	PutDeadLetter(ctx context.Context, dl kftype.DeadLetter) error
	// CancelItem records an item of a cancelled batch that never ran as
	// cancelled (unless it has a result) and terminates its delivery.
	CancelItem(ctx context.Context, d Delivery, it kftype.Item, by string) (bool, error)
}
