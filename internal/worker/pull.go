package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// pull fetches exactly as many messages as there are free slots (never a
// prefetch whose ack wait could run out in a buffer) and starts one
// goroutine per message. Up to maxFetches fetches may be in flight at once,
// each asking for the slots free when it is issued: a slot freed while a
// fetch is on its way is filled by the next one, not held up behind it.
// A fetch is never cancelled midway (that would drop messages already on
// their way); each lasts at most pullWait (3s). pull returns when pullCtx
// ends and its fetches are over; messages that arrive after that are
// nak'ed for immediate redelivery.
func (w *Worker) pull(pullCtx, runCtx context.Context, slots *sync.WaitGroup) {
	c := w.cfg.Worker.Concurrency
	free := make(chan struct{}, c)
	for range c {
		free <- struct{}{}
	}
	fetches := make(chan struct{}, min(maxFetches, c))
	// c long-lived slot goroutines take the messages: a goroutine per
	// message would grow a fresh stack for every item.
	work := make(chan jetstream.Msg, c)
	for range c {
		go func() {
			for msg := range work {
				w.handle(pullCtx, runCtx, msg)
				w.metrics.SlotsBusy.Dec()
				w.busy.Add(-1)
				free <- struct{}{}
				slots.Done()
			}
		}()
	}
	var inFlight sync.WaitGroup
	defer func() {
		inFlight.Wait()
		close(work) // the slot goroutines end once their last item is settled
	}()
	pullWait := min(3*time.Second, max(w.cfg.Queue.AckWait/2, 500*time.Millisecond))
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	// Fetch goroutines report failed fetches here; only this loop uses the
	// consumer handle and the backoff.
	failed := make(chan error, maxFetches)
	for {
		select {
		case err := <-failed:
			w.pullFailed(pullCtx, err, backoff)
			continue
		default:
		}
		select {
		case fetches <- struct{}{}:
		case <-pullCtx.Done():
			return
		}
		select {
		case <-free:
		case <-pullCtx.Done():
			return
		}
		if pullCtx.Err() != nil { // both were ready: stopping wins
			return
		}
		n := 1
	more:
		for n < c {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		batch, err := w.cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
		if err == nil {
			backoff.reset()
		} else {
			for range n {
				free <- struct{}{}
			}
			<-fetches
			w.pullFailed(pullCtx, err, backoff)
			continue
		}
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			defer func() { <-fetches }()
			got := 0
			for msg := range batch.Messages() {
				got++
				if pullCtx.Err() != nil {
					// Shutting down: hand it straight back.
					w.nakNow(msg, "worker shutting down")
					free <- struct{}{}
					continue
				}
				slots.Add(1)
				w.busy.Add(1)
				w.metrics.SlotsBusy.Inc()
				work <- msg // never blocks: a free slot was taken for it
			}
			w.metrics.FetchBatch.Observe(float64(got))
			for range n - got {
				free <- struct{}{}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				select {
				case failed <- err:
				default: // one report is enough
				}
			}
		}()
	}
}

// maxFetches bounds the fetches a worker has in flight at once; the
// consumer's max_waiting is sized for it.
const maxFetches = queue.MaxFetchesPerWorker

func (w *Worker) pullFailed(ctx context.Context, err error, b *backoff) {
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		// The server lost the consumer (a memory-backed server restarted):
		// set the queue up again.
		w.log.Warn("consumer gone: setting the queue up again", zap.Error(err))
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, qerr := queue.Open(octx, w.nc, w.q.Config()); qerr == nil {
			if cons, cerr := w.q.Consumer(octx); cerr == nil {
				w.cons = cons // only the puller uses it
			}
		}
		cancel()
	} else {
		w.log.Warn("pulling messages failed; retrying", zap.Error(err), zap.Duration("in", b.peek()))
	}
	b.wait(ctx)
}

// nakNow hands a message back for immediate redelivery, best effort.
func (w *Worker) nakNow(msg jetstream.Msg, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := queue.Nak(ctx, w.nc, msg, 0); err != nil {
		w.log.Warn("nak failed; the message comes back after its ack wait", zap.String("why", why), zap.Error(err))
	}
}

// backoff is an exponential wait for retry loops.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi, cur: lo} }

func (b *backoff) reset()              { b.cur = b.min }
func (b *backoff) peek() time.Duration { return b.cur }

// wait sleeps the current delay (or until ctx ends) and doubles it.
func (b *backoff) wait(ctx context.Context) {
	_ = ctxsleep.Sleep(ctx, b.cur)
	b.cur = min(b.cur*2, b.max)
}
