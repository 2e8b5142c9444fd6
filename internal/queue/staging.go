package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Staging (docs/batch-api.md): the items of a batch enqueued with a
// deadline wait for a provider's Batch API on a staging subject of their
// batch,
//
//	<prefix>.b.<token(batch)>.s.<kind>.<token(scope)|~>.<token(endpoint)|~>
//
// four tokens after the batch's where a lane's subjects have one (kind)
// or two (kind, scope): no lane's filter (laneFilter) matches them, so no
// consumer delivers them, and the work stream's subjects (<prefix>.b.>)
// already hold them, so a stream made by an earlier version takes them
// without a change of its configuration. What reads a batch's subjects as
// a whole (HeldItems, batchHoldsAnything) counts them too. A worker reads
// them in stream order by direct gets (NextStaged), writes them into a
// provider batch's record, and then purges them (PurgeStaged).

// noToken stands for an empty scope or endpoint in a staging subject: a
// token Token never writes ('~' is always followed by two hex digits).
const noToken = "~"

func tokenOr(s string) string {
	if s == "" {
		return noToken
	}
	return Token(s)
}

func untokenOr(t string) (string, error) {
	if t == noToken {
		return "", nil
	}
	return Untoken(t)
}

// StagingSubject is where an item of batch, kind, scope and endpoint
// ("" for none, or the provider's default) waits for a Batch API.
func (q *Queue) StagingSubject(batch, kind, scope, endpoint string) string {
	return q.cfg.SubjectPrefix + ".b." + Token(batch) + ".s." + kind + "." + tokenOr(scope) + "." + tokenOr(endpoint)
}

// stagingFilter matches the staging subjects of batch, and no lane's.
func (q *Queue) stagingFilter(batch string) string {
	return q.cfg.SubjectPrefix + ".b." + Token(batch) + ".s.*.*.*"
}

// StagingParts reads a staging subject of batch back: its kind, scope
// and endpoint.
func (q *Queue) StagingParts(batch, subject string) (kind, scope, endpoint string, err error) {
	head := q.cfg.SubjectPrefix + ".b." + Token(batch) + ".s."
	rest, ok := strings.CutPrefix(subject, head)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return "", "", "", fmt.Errorf("queue: %q is not a staging subject of batch %q", subject, batch)
	}
	if scope, err = untokenOr(parts[1]); err != nil {
		return "", "", "", err
	}
	if endpoint, err = untokenOr(parts[2]); err != nil {
		return "", "", "", err
	}
	return parts[0], scope, endpoint, nil
}

// StagedSubjects counts the messages waiting on each staging subject of
// batch.
func (q *Queue) StagedSubjects(ctx context.Context, batch string) (map[string]uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	si, err := q.work.Info(sctx, jetstream.WithSubjectFilter(q.stagingFilter(batch)))
	if err != nil {
		return nil, fmt.Errorf("queue: staged items of batch %q: %w", batch, noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	return si.State.Subjects, nil
}

// StagedMsg is a message read from a staging subject.
type StagedMsg struct {
	Seq     uint64
	Subject string
	Item    kftype.Item
	Time    time.Time
}

// NextStaged reads the first message on subject stored at seq or after;
// nil when there is none.
func (q *Queue) NextStaged(ctx context.Context, subject string, seq uint64) (*StagedMsg, error) {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	m, err := q.work.GetMsg(sctx, seq, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: read %s from %d: %w", subject, seq, noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	it, err := DecodeStoredItem(m)
	if err != nil {
		return nil, fmt.Errorf("queue: message %d on %s: %w", m.Sequence, subject, err)
	}
	it.Staged = true
	return &StagedMsg{Seq: m.Sequence, Subject: m.Subject, Item: it, Time: m.Time}, nil
}

// PurgeStaged deletes the messages of subject stored up to and including
// seq; those already gone are no matter: it can be done again.
func (q *Queue) PurgeStaged(ctx context.Context, subject string, through uint64) error {
	sctx, cancel := context.WithTimeout(ctx, q.cfg.RequestTimeout)
	defer cancel()
	if err := q.work.Purge(sctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(through+1)); err != nil {
		return fmt.Errorf("queue: purge %s through %d: %w", subject, through, noAnswer(ctx, q.cfg.RequestTimeout, err))
	}
	return nil
}
