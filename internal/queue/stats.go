package queue

import (
	"context"
	"fmt"
	"time"
)

// Stats describes the queue for `producer status`.
type Stats struct {
	Stream      StreamStats   `json:"stream"`
	Consumer    ConsumerStats `json:"consumer"`
	DeadLetters uint64        `json:"dead_letters"`
	Results     uint64        `json:"results"`
}

// StreamStats describes the work stream.
type StreamStats struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

// ConsumerStats describes the workers' consumer. Pending + AckPending is
// the backlog an autoscaler (KEDA's nats-jetstream scaler) reads.
type ConsumerStats struct {
	Name string `json:"name"`
	// Pending: not yet delivered.
	Pending uint64 `json:"pending"`
	// AckPending: delivered, not yet acknowledged (running or waiting).
	AckPending int `json:"ack_pending"`
	// Redelivered: delivered more than once and still unacknowledged.
	Redelivered int `json:"redelivered"`
	// Waiting: pull requests waiting for messages (idle worker capacity).
	Waiting    int       `json:"waiting"`
	LastActive time.Time `json:"last_active,omitzero"`
}

// Stats reads the stream, consumer and dead-letter counts.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	wi, err := q.work.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("queue: stream %s: %w", q.cfg.Stream, err)
	}
	st.Stream = StreamStats{Name: q.cfg.Stream, Messages: wi.State.Msgs, Bytes: wi.State.Bytes}
	cons, err := q.Consumer(ctx)
	if err != nil {
		return st, err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("queue: consumer %s: %w", q.cfg.Consumer, err)
	}
	st.Consumer = ConsumerStats{
		Name: q.cfg.Consumer, Pending: ci.NumPending, AckPending: ci.NumAckPending,
		Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting,
	}
	if ci.Delivered.Last != nil {
		st.Consumer.LastActive = *ci.Delivered.Last
	}
	di, err := q.dlq.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("queue: stream %s: %w", q.dlqStream(), err)
	}
	st.DeadLetters = di.State.Msgs
	ri, err := q.results.Info(ctx)
	if err != nil {
		return st, fmt.Errorf("queue: stream %s: %w", q.resultsStream(), err)
	}
	st.Results = ri.State.Msgs
	return st, nil
}
