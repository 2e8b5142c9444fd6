package executor

import (
	"context"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Delivery is one delivery of a work message. The worker's adapter wraps a
// jetstream.Msg; each reply is confirmed by the server (a nil error means
// it was applied).
type Delivery interface {
	// Item decodes the item the message carries; an error means it cannot
	// be read (the item is dead-lettered as undecodable, under whatever
	// the item holds of its IDs).
	Item() (kftype.Item, error)
	// Delivered is the server's delivery count: 1 on the first delivery.
	Delivered() uint64
	// Subject names the message when its item has no ID.
	Subject() string
	// Ack acknowledges the message.
	Ack(ctx context.Context) error
	// Nak asks for redelivery after delay (0: at once).
	Nak(ctx context.Context, delay time.Duration) error
	// Term stops redelivery for good (on a work-queue stream it deletes
	// the message), with a reason.
	Term(ctx context.Context, reason string) error
	// InProgress resets the message's ack wait.
	InProgress(ctx context.Context) error
}
