package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// The ceilings: the same servers doing the same message traffic without
// keyfleet's worker. They run in this process (their client CPU is the
// "kfbench" column of the CPU table).

// jsMode is what a ceiling consumer does with each message.
type jsMode int

const (
	// jsPullAck: Fetch batches of up to 64, plain (unconfirmed) Ack.
	jsPullAck jsMode = iota
	// jsPullAckResult: as jsPullAck plus an async publish of a result
	// record per message on the results stream (confirmed at the end).
	jsPullAckResult
	// jsWorkerCalls: the worker's NATS calls per message, with its
	// concurrency: 64 slots per consumer, Fetch of exactly the free slots,
	// one goroutine per message committing its result and ack through the
	// worker's queue.Committer (results confirmed, then acks confirmed by
	// one flush per batch) — no Redis, no job.
	jsWorkerCalls
)

var jsModeNames = map[jsMode]string{
	jsPullAck:       "ceiling: JetStream pull+ack",
	jsPullAckResult: "ceiling: JetStream pull+ack+async result publish",
	jsWorkerCalls:   "ceiling: JetStream, the worker's calls (committed result + ack)",
}

// jsCeiling publishes n items exactly as keyfleet enqueues them (same
// stream configuration, headers, payload and message IDs), then consumes
// them with 2 consumers, each on its own connection as 2 worker processes
// would. The clock runs from the first Fetch until the work stream is empty
// (every ack applied) and, when results are published, the results stream
// holds n results. It returns messages per second.
func jsCeiling(ctx context.Context, e *env, smp *sample, n int, mode jsMode, key string) error {
	f, err := e.newFleet(ctx, "js", fleetSpec{creds: []credSpec{{id: "k0", max: 1}}, concurrency: 1})
	if err != nil {
		return err
	}
	defer f.close(ctx)
	if err := f.enqueue(ctx, n, 0); err != nil {
		return err
	}
	const consumers = 2
	type consumer struct {
		nc   *nats.Conn
		q    *queue.Queue
		cons jetstream.Consumer
	}
	cs := make([]consumer, consumers)
	for i := range cs {
		nc, err := nats.Connect(e.natsURL, nats.Name(fmt.Sprintf("kfbench-ceiling-%d", i)))
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer nc.Close()
		q, err := queue.Attach(ctx, nc, queue.ConfigFrom(f.cfg))
		if err != nil {
			return err
		}
		// The items are in the batch's lane (its own consumer), as the
		// workers pull them.
		cons, err := q.LaneConsumer(ctx, kftype.Lane(f.batch, ""))
		if err != nil {
			return err
		}
		cs[i] = consumer{nc: nc, q: q, cons: cons}
	}
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	var got atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, consumers)
	start := time.Now()
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch mode {
			case jsWorkerCalls:
				err = consumeLikeWorker(runCtx, c.q, c.cons, &got, n)
			default:
				err = consumeBatches(runCtx, c.q, c.cons, &got, n, mode == jsPullAckResult)
			}
			if err != nil && runCtx.Err() == nil {
				errc <- err
			}
		}()
	}
	js := f.q.JetStream()
	waitErr := func() error {
		if _, err := waitStream(ctx, js, f.stream, 120*time.Second, 5*time.Millisecond,
			func(m uint64) bool { return m == 0 }, func() string { return "" }); err != nil {
			return err
		}
		if mode == jsPullAck {
			return nil
		}
		_, err := waitStream(ctx, js, f.stream+"_RESULTS", 120*time.Second, 5*time.Millisecond,
			func(m uint64) bool { return m >= uint64(n) }, func() string { return "" })
		return err
	}()
	wall := time.Since(start)
	stop()
	wg.Wait()
	close(errc)
	if err := errors.Join(waitErr, <-errc); err != nil {
		return err
	}
	use, err := m.done(ctx, jsModeNames[mode], n, wall, nil)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values[key] = float64(n) / wall.Seconds()
	smp.values[key+"_cpu_bound"] = cpuBound(use, n, "nats-server", "kfbench")
	return nil
}

// cpuBound is the rate the machine's cores would allow if the named
// processes had them to themselves: cores ÷ their CPU seconds per item. It
// does not depend on what else ran meanwhile, unlike a measured rate on a
// shared machine.
func cpuBound(u CPUUse, n int, procs ...string) float64 {
	cpu := 0.0
	for _, p := range procs {
		cpu += u.Proc[p]
	}
	if cpu <= 0 || n == 0 {
		return math.NaN()
	}
	return float64(runtime.NumCPU()) / (cpu / float64(n))
}

// benchResult is a result record like a worker's for the ceilings.
func benchResult(q *queue.Queue, msg jetstream.Msg) (subject string, data []byte) {
	r := benchResultRecord(msg)
	data, _ = json.Marshal(r)
	return q.ResultSubject(r.Batch, r.Item), data
}

func benchResultRecord(msg jetstream.Msg) kftype.Result {
	it, _ := queue.DecodeItem(msg)
	now := time.Now().UTC()
	return kftype.Result{Item: it.ID, Batch: it.Batch, Kind: it.Kind, Outcome: kftype.OutcomeSucceeded, Attempts: 1,
		Duration: 0.000004, CredentialID: "k0", LeasedAt: now, Output: `{"slept_ms":0}`, Worker: "ceiling", FinishedAt: now}
}

func consumeBatches(ctx context.Context, q *queue.Queue, cons jetstream.Consumer, got *atomic.Int64, n int, withResult bool) error {
	js := q.JetStream()
	for got.Load() < int64(n) && ctx.Err() == nil {
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return fmt.Errorf("bench: fetch: %w", err)
		}
		for msg := range batch.Messages() {
			if withResult {
				subj, data := benchResult(q, msg)
				if _, err := js.PublishAsync(subj, data); err != nil {
					return fmt.Errorf("bench: publish result: %w", err)
				}
			}
			if err := msg.Ack(); err != nil {
				return fmt.Errorf("bench: ack: %w", err)
			}
			got.Add(1)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("bench: fetch: %w", err)
		}
	}
	if withResult {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
		}
	}
	return nil
}

// consumeLikeWorker approximates internal/worker's pull loop and makes the
// NATS calls of a succeeding item, without Redis and without the job. It
// is not the worker's code, which is a method of worker.Worker bound to its
// pool, metrics and settlement, and differs from it: one fetch at a time
// here (the worker keeps up to 4 in flight) and a goroutine per message
// (the worker keeps one long-lived goroutine per slot).
func consumeLikeWorker(ctx context.Context, q *queue.Queue, cons jetstream.Consumer, got *atomic.Int64, n int) error {
	const slots = 64
	commits := q.NewCommitter(queue.CommitterOptions{})
	defer commits.Close()
	free := make(chan struct{}, slots)
	for range slots {
		free <- struct{}{}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var firstErr atomic.Value
	for got.Load() < int64(n) && ctx.Err() == nil {
		select {
		case <-free:
		case <-ctx.Done():
			return nil
		}
		k := 1
	more:
		for k < slots {
			select {
			case <-free:
				k++
			default:
				break more
			}
		}
		batch, err := cons.Fetch(k, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return fmt.Errorf("bench: fetch: %w", err)
		}
		recv := 0
		for msg := range batch.Messages() {
			recv++
			wg.Add(1)
			go func() {
				defer func() { free <- struct{}{}; wg.Done() }()
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := commits.Commit(sctx, benchResultRecord(msg), msg); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				got.Add(1)
			}()
		}
		for range k - recv {
			free <- struct{}{}
		}
		if err, _ := firstErr.Load().(error); err != nil {
			return err
		}
	}
	return nil
}

// redisCeiling runs EVALSHA of a trivial script from 64 goroutines on one
// client with 64 connections for d; it returns scripts per second.
func redisCeiling(ctx context.Context, e *env, smp *sample, d time.Duration, key string) error {
	rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 64, MinIdleConns: 64})
	defer rdb.Close()
	script := redis.NewScript(`return 1`)
	if err := script.Load(ctx, rdb).Err(); err != nil {
		return fmt.Errorf("bench: script load: %w", err)
	}
	return hammer(ctx, e, smp, d, "ceiling: raw EVALSHA, 64 clients", key, func(int) error {
		if err := script.EvalSha(ctx, rdb, nil).Err(); err != nil {
			return fmt.Errorf("bench: evalsha: %w", err)
		}
		return nil
	})
}

// hammer calls op from 64 goroutines (g is the goroutine's number) until d
// has passed, op fails or ctx ends, and records the calls per second as
// key, with their CPU use under the name what.
func hammer(ctx context.Context, e *env, smp *sample, d time.Duration, what, key string, op func(g int) error) error {
	m, err := e.meter(ctx)
	if err != nil {
		return err
	}
	var ops atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := op(g); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	use, err := m.done(ctx, what, int(ops.Load()), wall, nil)
	if err != nil {
		return err
	}
	smp.cpu = append(smp.cpu, use)
	smp.values[key] = float64(ops.Load()) / wall.Seconds()
	return nil
}

// poolCeiling: the pool's own acquire+release pairs per second, in
// process (pkg/creds), 64 goroutines on one Pool, credentials as in the
// throughput scenario (8 × max_concurrent 64, so nobody waits).
func poolCeiling(ctx context.Context, e *env, smp *sample, d time.Duration, key string) error {
	rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr, PoolSize: 80, MinIdleConns: 64})
	defer rdb.Close()
	defer e.rdb.FlushAll(context.WithoutCancel(ctx))
	p, err := creds.New(rdb, e.uniq("pool"))
	if err != nil {
		return err
	}
	defer p.Close()
	if err := registerKeys(ctx, p, 8, 64); err != nil {
		return err
	}
	owners := make([]string, 64)
	for g := range owners {
		owners[g] = fmt.Sprintf("bench/%d", g)
	}
	return hammer(ctx, e, smp, d, "ceiling: pool acquire+release, 64 goroutines (in process)", key, func(g int) error {
		l, err := p.Acquire(ctx, owners[g])
		if err == nil {
			err = p.Release(ctx, l)
		}
		if err != nil {
			return fmt.Errorf("bench: pool: %w", err)
		}
		return nil
	})
}

// registerKeys registers n credentials k0, k1, ... of max_concurrent
// maxConc.
func registerKeys(ctx context.Context, p *creds.Pool, n, maxConc int) error {
	defs := make([]creds.Credential, n)
	for i := range defs {
		defs[i] = creds.Credential{ID: fmt.Sprintf("k%d", i), MaxConcurrent: maxConc}
	}
	return p.Register(ctx, defs)
}
