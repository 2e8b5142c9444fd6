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
	// update: opened with Open (a worker): consumers are brought in line
	// with cfg; Attach (a producer) uses them as they are.
	update bool

	work, results, dlq jetstream.Stream
	workers, batches   jetstream.KeyValue
	// laneWriter is told of every batch record q writes (lanewriter.go).
	laneWriter LaneWriter
	// laneFetched, when set (by tests), runs when a cancel's drain has
	// fetched the last of a lane, before it asks what the lane still holds.
	laneFetched func(lane string)
}

// Open creates or updates the streams and the buckets, idempotently:
// whoever starts first creates them, later starts read them and update
// only those whose configuration differs (see holds.go). Workers open the
// queue this way; the lanes' consumers are made when first pulled from
// (LaneConsumer).
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	return open(ctx, nc, cfg, true)
}

// Attach opens the queue like Open but never changes what exists: missing
// streams or buckets are created, existing ones are used as they are, and
// so are the lanes' consumers (LaneConsumer). The producer attaches, so
// that an operator's command run with a different configuration cannot
// rewrite the running fleet's settings.
func Attach(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	return open(ctx, nc, cfg, false)
}

func open(ctx context.Context, nc *nats.Conn, cfg Config, update bool) (*Queue, error) {
	q, err := ensure(ctx, nc, cfg, update)
	return q, refused(nc, err)
}

func ensure(ctx context.Context, nc *nats.Conn, cfg Config, update bool) (*Queue, error) {
	cfg = cfg.WithDefaults()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("queue: jetstream: %w", err)
	}
	q := &Queue{nc: nc, js: js, cfg: cfg, update: update}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	if q.work, err = ensureStream(ctx, cfg.RequestTimeout, js, update, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "keyfleet work items",
		Subjects:    []string{q.batchSubjects()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     storage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		Discard:     jetstream.DiscardNew,
	}); err != nil {
		return nil, err
	}
	// The results and dead-letter streams keep the latest record of each
	// item, for ResultsMaxAge.
	records := func(name, description, subjects string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Description: description, Subjects: []string{subjects},
			Retention: jetstream.LimitsPolicy, MaxMsgsPerSubject: 1, MaxAge: cfg.ResultsMaxAge,
			Storage: storage, Replicas: cfg.Replicas,
		}
	}
	if q.results, err = ensureStream(ctx, cfg.RequestTimeout, js, update,
		records(q.resultsStream(), "keyfleet results: the latest outcome of each item", q.resultsSubjects())); err != nil {
		return nil, err
	}
	if q.dlq, err = ensureStream(ctx, cfg.RequestTimeout, js, update,
		records(q.dlqStream(), "keyfleet dead letters: items that failed for good", q.dlqSubjects())); err != nil {
		return nil, err
	}
	if q.workers, err = ensureBucket(ctx, cfg.RequestTimeout, js, update, jetstream.KeyValueConfig{
		Bucket:      q.workersBucket(),
		Description: "keyfleet workers seen recently",
		TTL:         cfg.HeartbeatTTL,
		Storage:     jetstream.MemoryStorage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("queue: worker bucket %s: %w", q.workersBucket(), err)
	}
	// A batch's record is kept as long as the batch holds items or results
	// (no TTL: a batch paused for weeks can still be resumed, a cancelled
	// one still refuses items); SweepBatchRecords deletes it after that.
	if q.batches, err = ensureBucket(ctx, cfg.RequestTimeout, js, update, jetstream.KeyValueConfig{
		Bucket:      q.batchesBucket(),
		Description: "keyfleet batches: items enqueued per batch",
		Storage:     storage,
		Replicas:    cfg.Replicas,
	}); err != nil {
		return nil, fmt.Errorf("queue: batch bucket %s: %w", q.batchesBucket(), err)
	}
	return q, nil
}

func ensureStream(ctx context.Context, timeout time.Duration, js jetstream.JetStream, update bool, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var s jetstream.Stream
	var err error
	if update {
		if s, err = js.Stream(sctx, cfg.Name); err == nil && streamHolds(s.CachedInfo().Config, cfg) {
			return s, nil // see holds.go
		}
		s, err = js.CreateOrUpdateStream(sctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.CreateOrUpdateStream(sctx, cfg) // lost a creation race: update
		}
	} else if s, err = js.Stream(sctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		if s, err = js.CreateStream(sctx, cfg); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(sctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s (subjects %v): %w", cfg.Name, cfg.Subjects, noAnswer(ctx, timeout, err))
	}
	return s, nil
}

func ensureBucket(ctx context.Context, timeout time.Duration, js jetstream.JetStream, update bool, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if update {
		if kv := bucketAsIs(sctx, js, cfg); kv != nil {
			return kv, nil // see holds.go
		}
		kv, err := js.CreateOrUpdateKeyValue(sctx, cfg)
		return kv, noAnswer(ctx, timeout, err)
	}
	kv, err := js.KeyValue(sctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if kv, err = js.CreateKeyValue(sctx, cfg); errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(sctx, cfg.Bucket)
		}
	}
	return kv, noAnswer(ctx, timeout, err)
}

// bucketAsIs returns the bucket cfg names when it exists and its
// configuration holds cfg (see holds.go), else nil: a bucket to create or
// update, or an error the update will report.
func bucketAsIs(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || !bucketHolds(bs.StreamInfo().Config, cfg) {
		return nil
	}
	return kv
}

// noAnswer says so when err is a step's own timeout (not its caller's).
func noAnswer(ctx context.Context, timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("%w (no answer within %s)", err, timeout)
	}
	return err
}

// Config is the queue's configuration with defaults filled in.
func (q *Queue) Config() Config { return q.cfg }

// JetStream is the JetStream context the queue uses.
func (q *Queue) JetStream() jetstream.JetStream { return q.js }

// Conn is the NATS connection.
func (q *Queue) Conn() *nats.Conn { return q.nc }
