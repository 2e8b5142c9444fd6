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
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// pull fetches exactly as many messages as there are free slots (never a
// prefetch whose ack wait could run out in a buffer) and starts one
// goroutine per message. Which batch it fetches from is the lane
// schedule's answer (docs/waiting-model.md): strict priority, then fair
// share by weight, fleet-wide. Up to maxFetches fetches may be in flight
// at once, each asking for the slots free when it is issued. A fetch takes
// what its lane holds now (it never waits on an empty lane); with nothing
// to pick, the puller waits for a lane to come back from its rest, for a
// batch to change (the bucket's watch), or a second. pull returns when
// pullCtx ends and its fetches are over; messages that arrive after that
// are nak'ed for immediate redelivery.
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
	// The batches known at start come first: a paused or cancelled batch
	// is known as such before anything of it is pulled.
	select {
	case <-w.batches.ready:
	case <-time.After(10 * time.Second):
		w.log.Warn("the batch records took more than 10s to read: pulling anyway")
	case <-pullCtx.Done():
		return
	}
	backoff := newBackoff(100*time.Millisecond, 5*time.Second)
	giveBack := func(n int) {
		for range n {
			free <- struct{}{}
		}
		<-fetches
	}
	for {
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
		// Lanes whose items' classes have their share of this worker's
		// slots waiting for a key are passed over: the free slots go to
		// other lanes (waits.go).
		lane, share, wait, err := w.pick(pullCtx, n, w.waits.Full()...)
		if err != nil {
			giveBack(n)
			w.pullFailed(pullCtx, err, backoff)
			continue
		}
		if lane == "" {
			giveBack(n)
			w.idle(pullCtx, wait)
			continue
		}
		cons, err := w.laneConsumer(pullCtx, lane)
		var batch jetstream.MessageBatch
		if err == nil {
			batch, err = cons.FetchNoWait(share)
		}
		if err != nil {
			giveBack(n)
			w.forgetConsumer(lane)
			w.pullFailed(pullCtx, err, backoff)
			continue
		}
		backoff.reset()
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
			if got < share {
				w.laneShort(lane, share, got)
			}
			if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) &&
				!errors.Is(err, jetstream.ErrNoMessages) {
				w.log.Debug("fetch ended with an error", zap.String("lane", lane), zap.Error(err))
			}
		}()
	}
}

// pick asks the lane schedule where n free slots go, passing over the
// lanes of the classes in exclude (executor.ClassWaits). A schedule Redis
// lost is registered again from the batch records first (lanerepair.go).
func (w *Worker) pick(ctx context.Context, n int, exclude ...string) (lane string, share int, wait time.Duration, err error) {
	lane, share, wait, err = w.sched.Pick(ctx, n, exclude...)
	if errors.Is(err, lanes.ErrLost) {
		w.repairLanes(ctx, "the lane schedule is empty (did Redis lose its state?)")
		lane, share, wait, err = w.sched.Pick(ctx, n, exclude...)
		if errors.Is(err, lanes.ErrLost) {
			return "", 0, -1, nil // nothing registered at all: an idle fleet
		}
	}
	if err != nil {
		w.redisOK.Store(false)
	}
	return lane, share, wait, err
}

// laneShort reports a fetch that took less than its share: the schedule
// lets the lane rest; an empty one may be drained.
func (w *Worker) laneShort(lane string, share, got int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.sched.Got(ctx, lane, share, got); err != nil {
		w.log.Debug("reporting a short fetch", zap.String("lane", lane), zap.Error(err))
	}
	if got == 0 {
		w.checkDrained(ctx, lane)
	}
}

// idle waits while no lane can be picked: until the soonest resting lane
// may be picked again (wait >= 0), a batch changes, or at most a second.
func (w *Worker) idle(ctx context.Context, wait time.Duration) {
	if wait < 0 || wait > time.Second {
		wait = time.Second
	}
	t := time.NewTimer(max(wait, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.batches.wake:
	case <-ctx.Done():
	}
}

// maxFetches bounds the fetches a worker has in flight at once; the
// consumer's max_waiting is sized for it.
const maxFetches = queue.MaxFetchesPerWorker

func (w *Worker) pullFailed(ctx context.Context, err error, b *backoff) {
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		// The server lost the stream or a lane's consumer (a
		// memory-backed server restarted): set the queue up again; the
		// lanes' consumers are made again when next pulled from.
		w.log.Warn("consumer gone: setting the queue up again", zap.Error(err))
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, qerr := queue.Open(octx, w.nc, w.q.Config()); qerr != nil {
			w.log.Debug("setting the queue up again", zap.Error(qerr))
		}
		cancel()
		w.batches.mu.Lock()
		clear(w.batches.cons)
		w.batches.mu.Unlock()
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
