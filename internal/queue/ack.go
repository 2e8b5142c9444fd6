package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The acknowledgements below are sent as requests: the server answers
// each one, so a nil error means it was applied (jetstream.Msg's Nak, Term
// and InProgress are fire-and-forget; only DoubleAck confirms).

// ackBody is the acknowledgement's protocol body.
var ackBody = []byte("+ACK")

// Ack acknowledges msg and waits for the server's confirmation.
func Ack(ctx context.Context, msg jetstream.Msg) error {
	if err := msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("queue: ack: %w", err)
	}
	return nil
}

// Nak asks for redelivery after delay (0: at once), confirmed.
func Nak(ctx context.Context, nc *nats.Conn, msg jetstream.Msg, delay time.Duration) error {
	body := []byte("-NAK")
	if delay > 0 {
		body = fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	return ackRequest(ctx, nc, msg, body, "nak")
}

// Term stops redelivery for good (on a work-queue stream it deletes the
// message), confirmed.
func Term(ctx context.Context, nc *nats.Conn, msg jetstream.Msg, reason string) error {
	return ackRequest(ctx, nc, msg, []byte("+TERM "+reason), "term")
}

// InProgress resets the message's ack-wait timer, confirmed.
func InProgress(ctx context.Context, nc *nats.Conn, msg jetstream.Msg) error {
	return ackRequest(ctx, nc, msg, []byte("+WPI"), "in-progress")
}

func ackRequest(ctx context.Context, nc *nats.Conn, msg jetstream.Msg, body []byte, what string) error {
	if msg.Reply() == "" {
		return fmt.Errorf("queue: %s: message has no reply subject", what)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if _, err := nc.RequestWithContext(ctx, msg.Reply(), body); err != nil {
		return fmt.Errorf("queue: %s: %w", what, err)
	}
	return nil
}
