package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Queue is an open handle on keyfleet's streams.
type Queue struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config

	work, results, dlq jetstream.Stream
	workers            jetstream.KeyValue
}

// Open creates or updates the streams, the consumer and the worker bucket,
// idempotently: whoever starts first creates them, later starts update them
// to the same configuration.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	cfg = cfg.WithDefaults()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("queue: jetstream: %w", err)
	}
	q := &Queue{nc: nc, js: js, cfg: cfg}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	if q.work, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "keyfleet work items",
		Subjects:    []string{q.workSubjects()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		Discard:     jetstream.DiscardNew,
	}); err != nil {
		return nil, err
	}
	if q.results, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              q.resultsStream(),
		Description:       "keyfleet results: the latest outcome of each item",
		Subjects:          []string{q.resultsSubjects()},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxAge:            cfg.ResultsMaxAge,
		Storage:           storage,
		Replicas:          cfg.Replicas,
	}); err != nil {
		return nil, err
	}
	if q.dlq, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:              q.dlqStream(),
		Description:       "keyfleet dead letters: items that failed for good",
		Subjects:          []string{q.dlqSubjects()},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxAge:            cfg.ResultsMaxAge,
		Storage:           storage,
		Replicas:          cfg.Replicas,
	}); err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		Description:   "keyfleet workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		BackOff:       cfg.RedeliveryBackoff,
		FilterSubject: q.workSubjects(),
		MaxAckPending: 100_000,
		Replicas:      cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("queue: consumer %s on stream %s: %w", cfg.Consumer, cfg.Stream, err)
	}
	if q.workers, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      q.workersBucket(),
		Description: "keyfleet workers seen recently",
		TTL:         cfg.HeartbeatTTL,
		Storage:     jetstream.MemoryStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("queue: worker bucket %s: %w", q.workersBucket(), err)
	}
	return q, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.CreateOrUpdateStream(ctx, cfg) // lost a creation race: update
	}
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s (subjects %v): %w", cfg.Name, cfg.Subjects, err)
	}
	return s, nil
}

// Config is the queue's configuration with defaults filled in.
func (q *Queue) Config() Config { return q.cfg }

// JetStream is the JetStream context the queue uses.
func (q *Queue) JetStream() jetstream.JetStream { return q.js }

// Conn is the NATS connection.
func (q *Queue) Conn() *nats.Conn { return q.nc }

// Consumer returns the workers' durable pull consumer.
func (q *Queue) Consumer(ctx context.Context) (jetstream.Consumer, error) {
	c, err := q.js.Consumer(ctx, q.cfg.Stream, q.cfg.Consumer)
	if err != nil {
		return nil, fmt.Errorf("queue: consumer %s: %w", q.cfg.Consumer, err)
	}
	return c, nil
}
