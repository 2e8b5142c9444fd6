package queue

import (
	"cmp"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// Config names the streams and sets the consumer's delivery rules.
type Config struct {
	// Stream is the work stream's name (default "KEYFLEET"); the results
	// and dead-letter streams and the worker bucket are named after it.
	Stream string
	// SubjectPrefix: items are published on <prefix>.<kind> (default
	// "keyfleet.items").
	SubjectPrefix string
	// Consumer is the durable pull consumer every worker shares (default
	// "keyfleet-workers").
	Consumer string
	// AckWait: an unacknowledged delivery comes back after it (default
	// 30s). Workers keep their messages alive well within it.
	AckWait time.Duration
	// MaxDeliver bounds deliveries per message (default -1: unbounded;
	// attempts are bounded by the worker's max_attempts instead).
	MaxDeliver int
	// RedeliveryBackoff optionally spaces redeliveries after ack-wait
	// expiries (the consumer's BackOff).
	RedeliveryBackoff []time.Duration
	// DuplicateWindow: an item enqueued again inside it is dropped as a
	// duplicate (default 2h).
	DuplicateWindow time.Duration
	// Replicas of each stream (default 1).
	Replicas int
	// Memory selects memory storage instead of file storage.
	Memory bool
	// ResultsMaxAge is how long results and dead letters are kept (default
	// 7 days).
	ResultsMaxAge time.Duration
	// HeartbeatTTL: a worker not heard from for this long leaves the
	// registry (default 30s).
	HeartbeatTTL time.Duration
	// RequestTimeout bounds each step of Open and Attach (creating,
	// updating or looking up one stream, the consumer, the bucket) and
	// Consumer (default 5s, the JetStream client's own default): a cluster
	// without a meta leader leaves requests unanswered, and a step that
	// gets no answer fails soon, to be tried again (see Startup).
	RequestTimeout time.Duration
}

// WithDefaults fills the zero fields with their defaults.
func (c Config) WithDefaults() Config {
	c.Stream = cmp.Or(c.Stream, "KEYFLEET")
	c.SubjectPrefix = cmp.Or(c.SubjectPrefix, "keyfleet.items")
	c.Consumer = cmp.Or(c.Consumer, "keyfleet-workers")
	c.AckWait = cmp.Or(c.AckWait, 30*time.Second)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, -1)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, 2*time.Hour)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.ResultsMaxAge = cmp.Or(c.ResultsMaxAge, 7*24*time.Hour)
	c.HeartbeatTTL = cmp.Or(c.HeartbeatTTL, 30*time.Second)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 5*time.Second)
	return c
}

// ConfigFrom maps keyfleet's configuration onto the queue's; workers and
// the producer share it so that they agree on every stream and consumer
// setting.
func ConfigFrom(c *config.Config) Config {
	q := c.Queue
	return Config{
		Stream: q.Stream, SubjectPrefix: q.SubjectPrefix, Consumer: q.Consumer,
		AckWait: q.AckWait, MaxDeliver: q.MaxDeliver, RedeliveryBackoff: q.RedeliveryBackoff,
		DuplicateWindow: q.DuplicateWindow, Replicas: q.Replicas, Memory: q.Storage == "memory",
		ResultsMaxAge: q.ResultsMaxAge, HeartbeatTTL: max(30*time.Second, 3*c.Worker.Heartbeat),
	}
}
