package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// Lanes (docs/waiting-model.md): each batch's items are published on
// <prefix>.b.<token(batch)>.<kind>, or, when an item has a scope (its
// model, say: pool.scope), on <prefix>.b.<token(batch)>.<kind>.<token(scope)>,
// and pulled through the durable consumer of their lane, (batch, scope), so
// that the lane schedule (internal/lanes) can say which lane a worker
// pulls from next, and a worker can leave one scope's lane alone while it
// pulls another's.

// laneInactive is how long a batch's consumer lives without activity (a
// backstop: the worker that finds a lane drained deletes its consumer,
// and a lapsed consumer is made again when needed).
const laneInactive = time.Hour

// batchSubjects are the work stream's subjects: every lane's, and every
// batch's staging subjects (StagingSubject).
func (q *Queue) batchSubjects() string { return q.cfg.SubjectPrefix + ".b.>" }

// batchSubject is where an item of batch, kind and scope ("": none) is
// published.
func (q *Queue) batchSubject(batch, kind, scope string) string {
	s := q.cfg.SubjectPrefix + ".b." + Token(batch) + "." + kind
	if scope != "" {
		s += "." + Token(scope)
	}
	return s
}

// laneFilter is the subjects of lane's items: those of its batch and
// scope exactly. A batch's items without a scope have one token after the
// batch's (their kind), those with one two (kind, scope), so no two lanes'
// filters overlap, as a work-queue stream requires of its consumers.
func (q *Queue) laneFilter(lane string) string {
	batch, scope := kftype.LaneParts(lane)
	f := q.cfg.SubjectPrefix + ".b." + Token(batch) + ".*"
	if scope != "" {
		f += "." + Token(scope)
	}
	return f
}

// LaneConsumerName is the durable consumer of lane (a batch ID for the
// batch's items without a scope, a Lane for those of one scope):
// <consumer>-b-<16 hex digits of the batch ID's SHA-256>, followed for a
// scope by -s-<16 hex digits of the scope's>.
func (q *Queue) LaneConsumerName(lane string) string {
	batch, scope := kftype.LaneParts(lane)
	sum := sha256.Sum256([]byte(batch))
	name := q.cfg.Consumer + "-b-" + hex.EncodeToString(sum[:8])
	if scope != "" {
		sum = sha256.Sum256([]byte(scope))
		name += "-s-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// Metadata keys of a lane's consumer: what `nats consumer info` shows,
// and what a program reading the consumers can select on. They hold the
// IDs exactly; the description holds them escaped for a terminal.
const (
	MetaBatch = "keyfleet.batch"
	MetaScope = "keyfleet.scope" // absent for the batch's items without a scope
)

// maxDescribedID bounds how much of an ID a consumer's description
// quotes (the server takes at most 4 KiB; an ID may be 512 bytes of
// escapes).
const maxDescribedID = 200

// laneDescription names the lane's batch (and scope), so that `nats
// consumer ls` reads like `producer batch list`: "keyfleet batch
// docs-17083252" or "keyfleet batch docs-17083252, scope gpt-4o".
func laneDescription(lane string) string {
	batch, scope := kftype.LaneParts(lane)
	d := "keyfleet batch " + describedID(batch)
	if scope != "" {
		d += ", scope " + describedID(scope)
	}
	return d
}

// describedID is an ID as a description shows it: its control and bidi
// characters escaped (termsafe), cut at maxDescribedID bytes.
func describedID(id string) string {
	s := termsafe.String(id)
	if len(s) <= maxDescribedID {
		return s
	}
	n := maxDescribedID
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// laneMetadata is the lane's MetaBatch and MetaScope.
func laneMetadata(lane string) map[string]string {
	batch, scope := kftype.LaneParts(lane)
	m := map[string]string{MetaBatch: batch}
	if scope != "" {
		m[MetaScope] = scope
	}
	return m
}

func (q *Queue) laneConsumerConfig(lane string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           q.LaneConsumerName(lane),
		Description:       laneDescription(lane),
		Metadata:          laneMetadata(lane),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           q.cfg.AckWait,
		MaxDeliver:        q.cfg.MaxDeliver,
		BackOff:           q.cfg.RedeliveryBackoff,
		FilterSubject:     q.laneFilter(lane),
		MaxAckPending:     ConsumerMaxAckPending,
		MaxWaiting:        ConsumerMaxWaiting,
		Replicas:          q.cfg.Replicas,
		InactiveThreshold: laneInactive,
	}
}

// LaneConsumer returns the consumer of lane (a batch ID, or a Lane of a
// batch and a scope), creating it when it does not exist, with this
// queue's settings (ack wait, max deliver, back-off). A handle opened
// with Open (a worker) also brings an existing consumer's settings in
// line; one opened with Attach (a producer) uses it as it is.
func (q *Queue) LaneConsumer(ctx context.Context, lane string) (jetstream.Consumer, error) {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	c, err := q.laneConsumer(sctx, lane)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cfg := q.laneConsumerConfig(lane)
		c, err = q.js.CreateConsumer(sctx, q.cfg.Stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = q.js.Consumer(sctx, q.cfg.Stream, cfg.Durable)
		}
	}
	if err != nil {
		return nil, refused(q.nc, fmt.Errorf("queue: consumer of %s: %w", laneName(lane), noAnswer(ctx, q.cfg.RequestTimeout, err)))
	}
	return c, nil
}

// laneConsumer looks up lane's consumer and brings it in line (see
// LaneConsumer); jetstream.ErrConsumerNotFound when there is none.
func (q *Queue) laneConsumer(ctx context.Context, lane string) (jetstream.Consumer, error) {
	want := q.laneConsumerConfig(lane)
	c, err := q.js.Consumer(ctx, q.cfg.Stream, want.Durable)
	if err != nil {
		return nil, err
	}
	have := c.CachedInfo().Config
	want.MaxWaiting = have.MaxWaiting // JetStream cannot change it (see ConsumerMaxWaiting)
	if !q.update || consumerHolds(have, want) {
		return c, nil
	}
	return q.js.UpdateConsumer(ctx, q.cfg.Stream, want)
}

// laneName names a lane in messages.
func laneName(lane string) string {
	batch, scope := kftype.LaneParts(lane)
	if scope == "" {
		return fmt.Sprintf("batch %q", batch)
	}
	return fmt.Sprintf("batch %q, scope %q", batch, scope)
}

// LaneMessages counts the messages of lane still in the stream: on a
// work-queue stream a message stays until it is acknowledged or
// terminated, so 0 means the lane is drained, whatever state its consumer
// is in (one being created or electing a leader may report nothing
// pending while messages wait). It reads the stream's per-subject counts
// for the lane's subjects: one per kind of the batch (and scope).
func (q *Queue) LaneMessages(ctx context.Context, lane string) (uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	si, err := q.work.Info(sctx, jetstream.WithSubjectFilter(q.laneFilter(lane)))
	if err != nil {
		return 0, fmt.Errorf("queue: messages of %s: %w", laneName(lane), noAnswer(ctx, q.cfg.RequestTimeout, err))
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

// DeleteLaneConsumer deletes a drained lane's consumer (its messages, if
// any came meanwhile, stay in the stream; the next LaneConsumer makes it
// again).
func (q *Queue) DeleteLaneConsumer(ctx context.Context, lane string) error {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	err := q.js.DeleteConsumer(sctx, q.cfg.Stream, q.LaneConsumerName(lane))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("queue: delete the consumer of %s: %w", laneName(lane), err)
	}
	return nil
}

// BatchLanes lists batch's lanes: the one of its items without a scope,
// and one per scope its record names or the stream holds messages of (an
// enqueue adds its scopes to the record after publishing: a cancel that
// raced it still finds them).
func (q *Queue) BatchLanes(ctx context.Context, batch string) ([]string, error) {
	lanes := []string{batch}
	seen := map[string]bool{"": true}
	add := func(scope string) {
		if !seen[scope] {
			seen[scope] = true
			lanes = append(lanes, kftype.Lane(batch, scope))
		}
	}
	b, err := q.Batch(ctx, batch)
	if err != nil && !errors.Is(err, ErrNoBatch) {
		return nil, err
	}
	for _, s := range b.Scopes {
		add(s)
	}
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	head := q.cfg.SubjectPrefix + ".b." + Token(batch) + "."
	si, err := q.work.Info(sctx, jetstream.WithSubjectFilter(head+"*.*"))
	if err != nil {
		return nil, fmt.Errorf("queue: messages of batch %q: %w", batch, noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	for subj := range si.State.Subjects {
		_, tok, ok := strings.Cut(strings.TrimPrefix(subj, head), ".")
		if !ok {
			continue
		}
		if scope, err := Untoken(tok); err == nil && scope != "" {
			add(scope)
		}
	}
	slices.Sort(lanes[1:])
	return lanes, nil
}
