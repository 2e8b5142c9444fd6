package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
)

// Start-up retry defaults.
const (
	// AttemptTimeoutDefault bounds one attempt of Startup (Open or Attach
	// and whatever the caller does with it) when Startup.Attempt is 0.
	// Each step of an attempt has its own shorter bound,
	// Config.RequestTimeout.
	AttemptTimeoutDefault = 30 * time.Second
	// firstWait is the wait before the first retry; each retry doubles it,
	// up to maxWait.
	firstWait = 100 * time.Millisecond
	maxWait   = 5 * time.Second
)

// Startup is how start-up waits for a JetStream that is not ready yet (see
// Transient): a NATS cluster still forming or electing leaders (a fresh
// deployment, a rolling restart), a server still starting JetStream. It
// tries again with exponential backoff until Timeout has passed, then
// reports the last error; any other error ends it at once. The zero value
// tries once.
type Startup struct {
	// Timeout bounds the retries: no attempt starts later than Timeout
	// after the first. 0: one attempt.
	Timeout time.Duration
	// Attempt bounds each attempt. Default AttemptTimeoutDefault.
	Attempt time.Duration
	// Waiting, when set, is called before each retry with the transient
	// error and the wait before the next attempt.
	Waiting func(err error, wait time.Duration)
}

// Open is Open, retried while JetStream is not ready.
func (s Startup) Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	return s.open(ctx, nc, cfg, Open)
}

// Attach is Attach, retried while JetStream is not ready.
func (s Startup) Attach(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	return s.open(ctx, nc, cfg, Attach)
}

// open runs open (Open or Attach) under Do.
func (s Startup) open(ctx context.Context, nc *nats.Conn, cfg Config, open func(context.Context, *nats.Conn, Config) (*Queue, error)) (*Queue, error) {
	var q *Queue
	err := s.Do(ctx, func(ctx context.Context) (err error) {
		q, err = open(ctx, nc, cfg)
		return err
	})
	return q, err
}

// Do runs attempt, each time with a context bounded by s.Attempt,
// until it returns nil or an error that is not Transient, or until
// s.Timeout has passed or ctx ends; then it returns the last error. After a
// Transient error past the bound the error says how long it waited.
func (s Startup) Do(ctx context.Context, attempt func(context.Context) error) error {
	each := s.Attempt
	if each <= 0 {
		each = AttemptTimeoutDefault
	}
	start := time.Now()
	deadline := start.Add(s.Timeout)
	wait := firstWait
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, each)
		err := attempt(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("%w (stopped waiting for JetStream: %w)", err, context.Cause(ctx))
		case !Transient(err):
			return err
		case s.Timeout <= 0:
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			attempts := "attempts"
			if n == 1 {
				attempts = "attempt"
			}
			return fmt.Errorf("JetStream not ready after %s (%d %s): %w",
				time.Since(start).Round(time.Millisecond), n, attempts, err)
		}
		// Equal jitter: workers started together do not retry in step.
		next := min(wait/2+rand.N(wait/2+1), left)
		if s.Waiting != nil {
			s.Waiting(err, next)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (stopped waiting for JetStream: %w)", err, context.Cause(ctx))
		case <-time.After(next):
		}
		wait = min(2*wait, maxWait)
	}
}
