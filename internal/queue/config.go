package queue

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/check"
)

// Config names the streams and sets the lanes' consumers' delivery rules.
type Config struct {
	// Stream is the work stream's name (default StreamDefault); the
	// results and dead-letter streams and the worker bucket are named
	// after it.
	Stream string
	// SubjectPrefix: a batch's items are published on
	// <prefix>.b.<batch>.<kind>[.<scope>] (see lanes.go; default
	// SubjectPrefixDefault).
	SubjectPrefix string
	// Consumer names the lanes' durable pull consumers (LaneConsumerName;
	// default ConsumerDefault).
	Consumer string
	// AckWait: an unacknowledged delivery comes back after it (default
	// AckWaitDefault). Workers keep their messages alive well within it.
	AckWait time.Duration
	// MaxDeliver bounds deliveries per message (default MaxDeliverDefault,
	// -1: unbounded; attempts are bounded by the worker's max_attempts
	// instead).
	MaxDeliver int
	// RedeliveryBackoff optionally spaces redeliveries after ack-wait
	// expiries (the consumer's BackOff).
	RedeliveryBackoff []time.Duration
	// DuplicateWindow: an item enqueued again inside it is dropped as a
	// duplicate (default DuplicateWindowDefault).
	DuplicateWindow time.Duration
	// Replicas of each stream (default ReplicasDefault).
	Replicas int
	// Memory selects memory storage instead of file storage.
	Memory bool
	// ResultsMaxAge is how long results and dead letters are kept (default
	// ResultsMaxAgeDefault).
	ResultsMaxAge time.Duration
	// HeartbeatTTL: a worker not heard from for this long leaves the
	// registry (default HeartbeatTTLDefault).
	HeartbeatTTL time.Duration
	// RequestTimeout bounds each step of Open and Attach (creating,
	// updating or looking up one stream, the consumer, the bucket) and
	// Consumer (default 5s, the JetStream client's own default): a cluster
	// without a meta leader leaves requests unanswered, and a step that
	// gets no answer fails soon, to be tried again (see Startup). It also
	// bounds the confirmations of one Committer batch.
	RequestTimeout time.Duration
}

// Defaults of Config, filled in by WithDefaults; config's queue section
// defaults to the same.
const (
	StreamDefault          = "KEYFLEET"
	SubjectPrefixDefault   = "keyfleet.items"
	ConsumerDefault        = "keyfleet-workers"
	AckWaitDefault         = 30 * time.Second
	MaxDeliverDefault      = -1
	DuplicateWindowDefault = 2 * time.Hour
	ReplicasDefault        = 1
	ResultsMaxAgeDefault   = 7 * 24 * time.Hour
	HeartbeatTTLDefault    = 30 * time.Second
	RequestTimeoutDefault  = 5 * time.Second
)

// Limits of each lane's consumer, sized for fleets of 1,000 workers: each
// worker has at most MaxFetchesPerWorker pull requests waiting, and at
// most its slots' messages unacknowledged.
const (
	// MaxFetchesPerWorker bounds the pull requests one worker has in flight.
	MaxFetchesPerWorker = 4
	// ConsumerMaxWaiting is the consumer's max_waiting: the pull requests it
	// holds at once (JetStream's default, 512, refuses the 129th worker's
	// fourth pull with "Exceeded MaxWaiting"). JetStream cannot change it
	// on an existing consumer: one made with less keeps it.
	ConsumerMaxWaiting = 8192
	// ConsumerMaxAckPending bounds the messages delivered and not yet
	// acknowledged across the fleet (its slots, plus hand-backs in flight).
	ConsumerMaxAckPending = 100_000
)

// WithDefaults fills the zero fields with their defaults.
func (c Config) WithDefaults() Config {
	c.Stream = cmp.Or(c.Stream, StreamDefault)
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, SubjectPrefixDefault)
	c.Consumer = cmp.Or(c.Consumer, ConsumerDefault)
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, MaxDeliverDefault)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, DuplicateWindowDefault)
	c.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	c.ResultsMaxAge = cmp.Or(c.ResultsMaxAge, ResultsMaxAgeDefault)
	c.HeartbeatTTL = cmp.Or(c.HeartbeatTTL, HeartbeatTTLDefault)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, RequestTimeoutDefault)
	return c
}

// ConfigFrom returns the queue settings of keyfleet's configuration
// (config.Config's QueueConfig), which workers and the producer share so
// that they agree on every stream and consumer setting. The queue package
// does not import config: config imports it for its defaults and rules.
func ConfigFrom(c interface{ QueueConfig() Config }) Config { return c.QueueConfig() }

// CheckName checks a stream name as JetStream does.
func CheckName(name string) error { return checkName(name, maxNameLength) }

// CheckConsumerName checks Config.Consumer: a stream name, short enough
// for the lane consumers named after it
// (LaneConsumerName adds up to laneSuffixLength bytes).
func CheckConsumerName(name string) error { return checkName(name, maxNameLength-laneSuffixLength) }

// maxNameLength is JetStream's longest stream or consumer name;
// laneSuffixLength what LaneConsumerName adds at most ("-b-" and "-s-",
// each with 16 hex digits).
const (
	maxNameLength    = 255
	laneSuffixLength = 2 * (3 + 16)
)

func checkName(name string, maxLen int) error {
	switch {
	case name == "":
		return errors.New("must be set")
	case len(name) > maxLen:
		return fmt.Errorf("must be at most %d bytes, got %d", maxLen, len(name))
	case strings.ContainsAny(name, ".*>/\\") || hasSpaceOrControl(name):
		return fmt.Errorf("%s: a NATS name cannot hold spaces, '.', '*', '>', '/' or '\\'", check.Quote(name))
	}
	return nil
}

// CheckSubjectPrefix checks a subject prefix: dot-separated tokens, no
// wildcards, not in NATS's reserved $ space.
func CheckSubjectPrefix(s string) error {
	if s == "" {
		return fmt.Errorf("must be set, e.g. %s", SubjectPrefixDefault)
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%s has an empty token (a leading, trailing or doubled '.')", check.Quote(s))
		case strings.ContainsAny(tok, "*>") || hasSpaceOrControl(tok):
			return fmt.Errorf("%s: subject tokens cannot hold spaces, '*' or '>'", check.Quote(s))
		}
	}
	if strings.HasPrefix(s, "$") {
		return fmt.Errorf("%s: subjects starting with '$' are reserved for NATS", check.Quote(s))
	}
	return nil
}

func hasSpaceOrControl(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
}
