package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// natsDelivery is a JetStream message as the executor sees it
// (executor.Delivery): every reply is confirmed by the server.
type natsDelivery struct {
	msg jetstream.Msg
	nc  *nats.Conn
}

func (d *natsDelivery) Item() (kftype.Item, error) { return queue.DecodeItem(d.msg) }

// Delivered is the server's delivery count (1 when the metadata cannot be
// read).
func (d *natsDelivery) Delivered() uint64 {
	if meta, err := d.msg.Metadata(); err == nil {
		return meta.NumDelivered
	}
	return 1
}

func (d *natsDelivery) Subject() string               { return d.msg.Subject() }
func (d *natsDelivery) Ack(ctx context.Context) error { return queue.Ack(ctx, d.msg) }
func (d *natsDelivery) InProgress(ctx context.Context) error {
	return queue.InProgress(ctx, d.nc, d.msg)
}

func (d *natsDelivery) Nak(ctx context.Context, delay time.Duration) error {
	return queue.Nak(ctx, d.nc, d.msg, delay)
}

func (d *natsDelivery) Term(ctx context.Context, reason string) error {
	return queue.Term(ctx, d.nc, d.msg, reason)
}
