package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lanes (docs/waiting-model.md): each batch's items are published on
// <prefix>.b.<token(batch)>.<kind> and pulled through the batch's own
// durable consumer, so that the lane schedule (internal/lanes) can say
// which batch a worker pulls from next. Messages of the previous version
// (<prefix>.<kind>) stay on the old durable, narrowed to <prefix>.*, which
// the workers pull as one more lane, LegacyLane, until it is empty.

// LegacyLane is the lane of the messages the previous version wrote (its
// consumer is Config.Consumer). No batch can have this ID: IDs hold no
// line break.
const LegacyLane = "\nlegacy"

// laneInactive is how long a batch's consumer lives without activity (a
// backstop: the worker that finds a lane drained deletes its consumer,
// and a lapsed consumer is made again when needed).
const laneInactive = time.Hour

func (q *Queue) batchSubjects() string { return q.cfg.SubjectPrefix + ".b.>" }

// batchSubject is where an item of batch and kind is published.
func (q *Queue) batchSubject(batch, kind string) string {
	return q.cfg.SubjectPrefix + ".b." + Token(batch) + "." + kind
}

// LaneConsumerName is the durable consumer of batch's lane.
func (q *Queue) LaneConsumerName(batch string) string {
	if batch == LegacyLane {
		return q.cfg.Consumer
	}
	sum := sha256.Sum256([]byte(batch))
	return q.cfg.Consumer + "-b-" + hex.EncodeToString(sum[:8])
}

func (q *Queue) laneConsumerConfig(batch string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           q.LaneConsumerName(batch),
		Description:       "keyfleet workers, one batch",
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           q.cfg.AckWait,
		MaxDeliver:        q.cfg.MaxDeliver,
		BackOff:           q.cfg.RedeliveryBackoff,
		FilterSubject:     q.cfg.SubjectPrefix + ".b." + Token(batch) + ".>",
		MaxAckPending:     ConsumerMaxAckPending,
		MaxWaiting:        ConsumerMaxWaiting,
		Replicas:          q.cfg.Replicas,
		InactiveThreshold: laneInactive,
	}
}

// LaneConsumer returns the consumer of lane (a batch ID, or LegacyLane),
// creating it when it does not exist, with this queue's settings (ack
// wait, max deliver, back-off). A handle opened with Open also brings an
// existing consumer's settings in line, as for the old durable.
func (q *Queue) LaneConsumer(ctx context.Context, lane string) (jetstream.Consumer, error) {
	if lane == LegacyLane {
		return q.Consumer(ctx)
	}
	cfg := q.laneConsumerConfig(lane)
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	c, err := q.js.Consumer(sctx, q.cfg.Stream, cfg.Durable)
	switch {
	case err == nil && (!q.update || consumerHolds(c.CachedInfo().Config, cfg)):
		return c, nil
	case err == nil:
		c, err = q.js.UpdateConsumer(sctx, q.cfg.Stream, cfg)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		c, err = q.js.CreateConsumer(sctx, q.cfg.Stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = q.js.Consumer(sctx, q.cfg.Stream, cfg.Durable)
		}
	}
	if err != nil {
		return nil, refused(q.nc, fmt.Errorf("queue: consumer of batch %q: %w", lane, noAnswer(ctx, q.cfg.RequestTimeout, err)))
	}
	return c, nil
}

// LaneMessages counts the messages of lane still in the stream: on a
// work-queue stream a message stays until it is acknowledged or
// terminated, so 0 means the lane is drained, whatever state its consumer
// is in (one being created or electing a leader may report nothing
// pending while messages wait). It reads the stream's per-subject counts
// for the lane's subjects: one per kind of the batch.
func (q *Queue) LaneMessages(ctx context.Context, lane string) (uint64, error) {
	filter := q.cfg.SubjectPrefix + ".b." + Token(lane) + ".>"
	if lane == LegacyLane {
		filter = q.workSubjects()
	}
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	si, err := q.work.Info(sctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, fmt.Errorf("queue: messages of batch %q: %w", lane, noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	var n uint64
	for _, c := range si.State.Subjects {
		n += c
	}
	return n, nil
}

// LaneHolds reports what a lane's consumer still holds: messages not yet
// delivered, and delivered ones not yet acknowledged (running, waiting
// for a key, or waiting for a redelivery).
func LaneHolds(ctx context.Context, c jetstream.Consumer) (pending uint64, unacked int, err error) {
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("queue: consumer info: %w", err)
	}
	return ci.NumPending, ci.NumAckPending, nil
}

// DeleteLaneConsumer deletes a drained batch's consumer (its messages, if
// any came meanwhile, stay in the stream; the next LaneConsumer makes it
// again). The old durable is never deleted.
func (q *Queue) DeleteLaneConsumer(ctx context.Context, lane string) error {
	if lane == LegacyLane {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	err := q.js.DeleteConsumer(sctx, q.cfg.Stream, q.LaneConsumerName(lane))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("queue: delete the consumer of batch %q: %w", lane, err)
	}
	return nil
}

// workStreamSubjects are the work stream's subjects: the previous
// version's and the lanes'.
func (q *Queue) workStreamSubjects() []string { return []string{q.workSubjects(), q.batchSubjects()} }

// withLaneSubjects adds the lanes' subjects to a work stream made by the
// previous version (a producer attaching must publish on them). It
// changes nothing else.
func (q *Queue) withLaneSubjects(ctx context.Context, s jetstream.Stream) (jetstream.Stream, error) {
	cfg := s.CachedInfo().Config
	if slices.Contains(cfg.Subjects, q.batchSubjects()) {
		return s, nil
	}
	cfg.Subjects = append(cfg.Subjects, q.batchSubjects())
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	s, err := q.js.UpdateStream(sctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: adding the batch subjects %s: %w", cfg.Name, q.batchSubjects(), noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	return s, nil
}
