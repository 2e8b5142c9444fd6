package queue

import (
	"context"
	"fmt"
	"strings"
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

// ConsumerStats describes the workers' consumers, one per batch lane,
// summed. Pending + AckPending is the backlog.
type ConsumerStats struct {
	// Name is Config.Consumer, the prefix of the lanes' consumers' names
	// (LaneConsumerName).
	Name string `json:"name"`
	// Lanes is the number of batch consumers summed in.
	Lanes int `json:"lanes"`
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
	st.Consumer = ConsumerStats{Name: q.cfg.Consumer}
	infos := q.work.ListConsumers(ctx)
	for ci := range infos.Info() {
		if ci.Config.FilterSubject == "" || !strings.HasPrefix(ci.Config.FilterSubject, q.cfg.SubjectPrefix+".b.") {
			continue // not a lane's: an operator's own consumer
		}
		st.Consumer.Lanes++
		st.Consumer.AckPending += ci.NumAckPending
		st.Consumer.Redelivered += ci.NumRedelivered
		st.Consumer.Waiting += ci.NumWaiting
		if ci.Delivered.Last != nil && ci.Delivered.Last.After(st.Consumer.LastActive) {
			st.Consumer.LastActive = *ci.Delivered.Last
		}
	}
	if err := infos.Err(); err != nil {
		return st, fmt.Errorf("queue: consumers of %s: %w", q.cfg.Stream, err)
	}
	// On a work-queue stream every message is either not yet delivered or
	// unacknowledged; a batch's lane consumer may not exist yet (it is made
	// when first pulled from), so pending is what the stream holds beyond
	// the unacknowledged.
	st.Consumer.Pending = wi.State.Msgs - min(wi.State.Msgs, uint64(max(st.Consumer.AckPending, 0)))
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
