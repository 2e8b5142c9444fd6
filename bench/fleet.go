package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// credSpec is one credential of a fleet's pool.
type credSpec struct {
	id   string
	max  int
	rate string // "" none
	// limits is the credential's limits as a YAML flow sequence, such as
	// "[{rate: 20/s, burst: 1}, {cost: 6000/10s}]"; "" none.
	limits string
	// account is the credential's account ("" none).
	account string
	// groups are the credential's key groups as a YAML flow sequence
	// ("" none).
	groups string
}

// accountSpec is one account of a fleet's pool.
type accountSpec struct {
	id, limits string // limits as credSpec's ("" none)
}

// keyCreds is n credentials k0, k1, … of max_concurrent max each.
func keyCreds(n, max int) []credSpec {
	out := make([]credSpec, n)
	for i := range out {
		out[i] = credSpec{id: fmt.Sprintf("k%d", i), max: max}
	}
	return out
}

// throughputSpec is the throughput scenario's fleet: 64 slots a worker, 8
// credentials of max_concurrent 64 (a credential is reserved and released
// per item but nobody waits).
func throughputSpec() fleetSpec { return fleetSpec{concurrency: 64, creds: keyCreds(8, 64)} }

// fleetSpec shapes a fleet's configuration.
type fleetSpec struct {
	creds       []credSpec
	accounts    []accountSpec
	concurrency int
	grace       time.Duration // worker.shutdown_grace (default 5s)
	ackWait     time.Duration // queue.ack_wait (default 30s)
	cooldown    time.Duration // pool.cooldown (0: the default, 60s)
	// cost adds pool.cost: {field: cost, default: 1}.
	cost bool
	// scope is pool.scope.field ("" none): enqueueKind gives each item
	// the scope its payload's field holds, as producer enqueue does.
	scope string
	// httpURL configures the http job kind to send items there ("" none);
	// costFrom is its cost_from; provider, when set, is its provider
	// (httpURL is then the API's base).
	httpURL, costFrom, provider string
	// exec is the jobs.exec section as a YAML flow mapping ("" none).
	exec string
	// workerEnv is added to every worker's environment (e.g. GOMAXPROCS=1).
	workerEnv []string
	// batchAPI is the jobs.batch_api section as a YAML flow mapping (""
	// none).
	batchAPI string
	// prices is pool.prices as a YAML flow mapping ("" none).
	prices string
	// extra, when set, is top-level YAML added to the configuration of
	// each worker (by its ID; "probe" for the run's own), such as a
	// gateway section with the worker's own address.
	extra func(worker string) string
	// kinds is jobs.kinds as YAML lines, indented for their place under
	// it ("" none).
	kinds string
	// retryBackoff is worker.retry_backoff as a YAML flow sequence (""
	// the default).
	retryBackoff string
}

// fleet is one run's stream, pool and worker processes.
type fleet struct {
	e       *env
	tag     string
	spec    fleetSpec
	stream  string
	prefix  string
	pool    string
	batch   string
	cfg     *config.Config // as the workers load it
	q       *queue.Queue
	workers []*workerProc
}

// newFleet writes nothing yet: it names the run and opens the queue with
// the configuration the workers will load (so the streams exist and the
// results can be read).
func (e *env) newFleet(ctx context.Context, scenario string, spec fleetSpec) (*fleet, error) {
	tag := e.uniq(scenario)
	f := &fleet{
		e: e, tag: tag, spec: spec,
		stream: "KFB_" + strings.ToUpper(tag),
		prefix: "kfb." + tag,
		pool:   "bench-" + tag,
		batch:  "batch-" + tag,
	}
	path, err := f.writeConfig("probe", 0)
	if err != nil {
		return nil, err
	}
	if f.cfg, err = config.Load(path, func(string) string { return "" }); err != nil {
		return nil, fmt.Errorf("bench: the generated configuration: %w", err)
	}
	if f.q, err = queue.Open(ctx, e.nc, queue.ConfigFrom(f.cfg)); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	// Its enqueues register their batches' lanes, as the producer's do.
	lw, err := batchlanes.New(lanes.New(e.rdb, f.q.Config().Stream), f.cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	f.q.SetLaneWriter(lw)
	return f, nil
}

// writeConfig writes the YAML a worker loads; listenPort 0: no listener.
func (f *fleet) writeConfig(name string, listenPort int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "nats: {url: %q}\nredis: {url: %q}\n", f.e.natsURL, f.e.redisURL)
	fmt.Fprintf(&b, "pool:\n  name: %s\n  credentials:\n", f.pool)
	for _, c := range f.spec.creds {
		fmt.Fprintf(&b, "    - {id: %s, secret_env: %s, max_concurrent: %d", c.id, secretEnv(c.id), c.max)
		if c.rate != "" {
			fmt.Fprintf(&b, ", rate: %q", c.rate)
		}
		if c.limits != "" {
			fmt.Fprintf(&b, ", limits: %s", c.limits)
		}
		if c.account != "" {
			fmt.Fprintf(&b, ", account: %s", c.account)
		}
		if c.groups != "" {
			fmt.Fprintf(&b, ", groups: %s", c.groups)
		}
		b.WriteString("}\n")
	}
	if len(f.spec.accounts) > 0 {
		b.WriteString("  accounts:\n")
		for _, a := range f.spec.accounts {
			fmt.Fprintf(&b, "    - {id: %s", a.id)
			if a.limits != "" {
				fmt.Fprintf(&b, ", limits: %s", a.limits)
			}
			b.WriteString("}\n")
		}
	}
	if f.spec.cooldown > 0 {
		fmt.Fprintf(&b, "  cooldown: %s\n", f.spec.cooldown)
	}
	if f.spec.cost {
		b.WriteString("  cost: {field: cost, default: 1}\n")
	}
	if f.spec.scope != "" {
		fmt.Fprintf(&b, "  scope: {field: %s}\n", f.spec.scope)
	}
	if f.spec.prices != "" {
		fmt.Fprintf(&b, "  prices: %s\n", f.spec.prices)
	}
	grace := f.spec.grace
	if grace == 0 {
		grace = 5 * time.Second
	}
	fmt.Fprintf(&b, "worker:\n  concurrency: %d\n  shutdown_grace: %s\n", f.spec.concurrency, grace)
	if f.spec.retryBackoff != "" {
		fmt.Fprintf(&b, "  retry_backoff: %s\n", f.spec.retryBackoff)
	}
	if listenPort > 0 {
		// Loopback only; the profiler serves the -profile option.
		fmt.Fprintf(&b, "  listen: 127.0.0.1:%d\n  pprof: true\n", listenPort)
	}
	ackWait := f.spec.ackWait
	if ackWait == 0 {
		ackWait = 30 * time.Second
	}
	fmt.Fprintf(&b, "queue:\n  stream: %s\n  subject_prefix: %s\n  consumer: workers\n  ack_wait: %s\n", f.stream, f.prefix, ackWait)
	if f.spec.httpURL != "" || f.spec.exec != "" || f.spec.batchAPI != "" || f.spec.kinds != "" {
		b.WriteString("jobs:\n")
	}
	if f.spec.kinds != "" {
		fmt.Fprintf(&b, "  kinds:\n%s\n", strings.TrimRight(f.spec.kinds, "\n"))
	}
	if f.spec.batchAPI != "" {
		fmt.Fprintf(&b, "  batch_api: %s\n", f.spec.batchAPI)
	}
	if f.spec.exec != "" {
		fmt.Fprintf(&b, "  exec: %s\n", f.spec.exec)
	}
	if f.spec.httpURL != "" {
		fmt.Fprintf(&b, "  http: {url: %q, timeout: 10s", f.spec.httpURL)
		if f.spec.provider != "" {
			fmt.Fprintf(&b, ", provider: %s", f.spec.provider)
		}
		if f.spec.costFrom != "" {
			fmt.Fprintf(&b, ", cost_from: %s", f.spec.costFrom)
		}
		b.WriteString("}\n")
	}
	if f.spec.extra != nil {
		b.WriteString(f.spec.extra(name))
	}
	b.WriteString("log: {level: warn, format: json}\n")
	path := filepath.Join(f.e.dir, "cfg", f.tag+"-"+name+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return path, nil
}

func secretEnv(id string) string {
	return "KFBENCH_SECRET_" + strings.ToUpper(strings.ReplaceAll(id, "-", "_"))
}

// secretOf is the secret a fleet's workers get for credential id (the
// stand-in API of scenarios 12 and 13 accepts the same).
func secretOf(id string) string { return "secret-of-" + id }

// workerEnviron is what a worker of the fleet gets added to its
// environment: the spec's workerEnv and the credentials' secrets.
func (f *fleet) workerEnviron() []string {
	env := append([]string(nil), f.spec.workerEnv...)
	for _, c := range f.spec.creds {
		env = append(env, secretEnv(c.id)+"="+secretOf(c.id))
	}
	return env
}

// workerProc is a running worker with its listener.
type workerProc struct {
	*proc
	id   string
	addr string // host:port of /metrics, /readyz, /debug/pprof
}

// startWorker starts a worker process; it does not wait for it.
func (f *fleet) startWorker(id string) (*workerProc, error) {
	port, err := launch.FreePort()
	if err != nil {
		return nil, err
	}
	path, err := f.writeConfig(id, port)
	if err != nil {
		return nil, err
	}
	p, err := f.e.start(f.tag+"-"+id, f.e.workerBin, []string{"--config", path, "--id", id}, f.workerEnviron())
	if err != nil {
		return nil, err
	}
	w := &workerProc{proc: p, id: id, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	f.workers = append(f.workers, w)
	return w, nil
}

// startWorkers starts a worker process of each ID; it does not wait for
// them.
func (f *fleet) startWorkers(ids ...string) error {
	for _, id := range ids {
		if _, err := f.startWorker(id); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits, at most 30 s for each, until every worker is ready.
func (f *fleet) waitReady(ctx context.Context) error {
	for _, w := range f.workers {
		if _, err := w.ready(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// startReady starts a worker process and waits, at most 30 s, until it is
// ready; it returns when that happened.
func (f *fleet) startReady(ctx context.Context, id string) (*workerProc, time.Time, error) {
	w, err := f.startWorker(id)
	if err != nil {
		return nil, time.Time{}, err
	}
	ready, err := w.ready(ctx, 30*time.Second)
	return w, ready, err
}

// ready polls /readyz until 200 and returns when that happened.
func (w *workerProc) ready(ctx context.Context, within time.Duration) (time.Time, error) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	url := "http://" + w.addr + "/readyz"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return time.Time{}, err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		switch {
		case ctx.Err() != nil:
			return time.Time{}, context.Cause(ctx)
		case w.Exited():
			return time.Time{}, fmt.Errorf("bench: worker %s exited before it was ready: %v\n%s", w.id, w.Err(), w.logTail())
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("bench: worker %s not ready within %s\n%s", w.id, within, w.logTail())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// metric sums the samples of a Prometheus metric on the worker's /metrics.
func (w *workerProc) metric(ctx context.Context, name string) (float64, error) {
	v, err := w.metrics(ctx, name)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// metrics sums the samples of each metric named, from one read of the
// worker's /metrics.
func (w *workerProc) metrics(ctx context.Context, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: %s /metrics: %w", w.id, err)
	}
	defer resp.Body.Close()
	sums := make([]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for i, name := range names {
			if !strings.HasPrefix(line, name) || len(line) <= len(name) || (line[len(name)] != ' ' && line[len(name)] != '{') {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sums[i] += v
			}
		}
	}
	return sums, sc.Err()
}

// stopWorkers stops every worker still running (SIGTERM, then waits) and
// returns their CPU seconds in all.
func (f *fleet) stopWorkers(ctx context.Context) (float64, error) {
	var errs []error
	for _, w := range f.workers {
		if err := w.Stop(ctx, 30*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("worker %s: %w", w.id, err))
		}
	}
	total := 0.0
	for _, w := range f.workers {
		c, err := w.cpu()
		if err != nil {
			errs = append(errs, err)
		}
		total += c
	}
	return total, errors.Join(errs...)
}

// finish ends a measured phase once every result exists: it stops the
// workers, closes the meter (before the results are read, which costs
// NATS and this process CPU of their own) and reads the results. The
// caller sets the CPUUse's Wall from the results.
func (f *fleet) finish(ctx context.Context, m *meter, variant string, n int) (CPUUse, []kftype.Result, error) {
	workersCPU, err := f.stopWorkers(ctx)
	if err != nil {
		return CPUUse{}, nil, err
	}
	use, err := m.done(ctx, variant, n, 0, map[string]float64{"workers": workersCPU})
	if err != nil {
		return CPUUse{}, nil, err
	}
	rs, err := f.results(ctx)
	return use, rs, err
}

// spanWall checks that all n results succeeded with a credential and sets
// use's Wall to their span, the first lease grant to the last finish.
func spanWall(use *CPUUse, rs []kftype.Result, n int) error {
	if err := checkSucceeded(rs, n); err != nil {
		return err
	}
	first, last := span(rs)
	use.Wall = last.Sub(first).Seconds()
	return nil
}

// profile saves CPU profiles of nats-server and of every worker, long
// enough for a run of n items, as <prefix><name>.pprof in -profile's
// folder while the run goes on; wait returns once they are saved (at once
// when off, or when -profile is not set).
func (f *fleet) profile(ctx context.Context, on bool, n int, prefix string) (wait func() error) {
	if !on || f.e.opts.ProfileDir == "" {
		return func() error { return nil }
	}
	// Long enough for the run; idle time adds nothing to a CPU profile.
	secs := int(math.Ceil(float64(n)/4000)) + 1
	targets := map[string]string{"nats-server": f.e.natsProfile}
	for _, w := range f.workers {
		targets["worker-"+w.id] = w.addr
	}
	var profiles sync.WaitGroup
	var mu sync.Mutex
	var profErr error
	for name, addr := range targets {
		profiles.Go(func() {
			if err := fetchProfile(ctx, addr, secs, filepath.Join(f.e.opts.ProfileDir, prefix+name+".pprof")); err != nil {
				mu.Lock()
				profErr = err
				mu.Unlock()
			}
		})
	}
	return func() error {
		profiles.Wait()
		return profErr
	}
}

// close stops the workers and forgets the run (streams, Redis).
func (f *fleet) close(ctx context.Context) error {
	for _, w := range f.workers {
		w.Kill()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return f.e.reset(rctx, []string{f.stream, f.stream + "_RESULTS", f.stream + "_DLQ", "OBJ_" + f.stream + "_PBINPUT"},
		[]string{f.stream + "_WORKERS", f.stream + "_BATCHES", f.stream + "_PBATCHES"})
}

// enqueue publishes n sleep items of ms milliseconds (confirmed).
func (f *fleet) enqueue(ctx context.Context, n int, ms float64) error {
	return f.enqueueKind(ctx, "sleep", n, func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"ms":%s}`, id, strconv.FormatFloat(ms, 'f', -1, 64))
	})
}

// enqueueKind publishes n items of a kind (confirmed); payload makes the
// JSON of the item with the given ID.
func (f *fleet) enqueueKind(ctx context.Context, kind string, n int, payload func(id string) []byte) error {
	pub, err := f.q.NewPublisher(0)
	if err != nil {
		return err
	}
	var scopes []string
	for i := range n {
		id := fmt.Sprintf("item-%06d", i)
		it := kftype.Item{ID: id, Batch: f.batch, Kind: kind, Payload: payload(id)}
		if f.spec.scope != "" {
			var err error
			if it.Scope, _, err = jsonl.Scope(it.Payload, f.spec.scope); err != nil {
				return fmt.Errorf("bench: item %s: %w", id, err)
			}
			if it.Scope != "" && !slices.Contains(scopes, it.Scope) {
				scopes = append(scopes, it.Scope)
			}
		}
		if err := pub.Add(ctx, it); err != nil {
			return err
		}
	}
	rep, err := pub.Flush(ctx)
	if err != nil {
		return err
	}
	if rep.Published != n {
		return fmt.Errorf("bench: enqueued %d of %d %s items (%d duplicates)", rep.Published, n, kind, rep.Duplicates)
	}
	// The batch's record makes the workers pull its lane.
	_, err = f.q.AddToBatch(ctx, f.batch, kind, rep.Published, queue.WithScopes(scopes...))
	return err
}

// waitResults polls the results stream until it holds n results (one per
// item) and returns when it saw them.
func (f *fleet) waitResults(ctx context.Context, n int, within time.Duration, every time.Duration) (time.Time, error) {
	return waitStream(ctx, f.q.JetStream(), f.stream+"_RESULTS", within, every, func(msgs uint64) bool { return msgs >= uint64(n) },
		func() string { return f.workerLogs() })
}

// waitStream polls a stream's message count until done says so.
func waitStream(ctx context.Context, js jetstream.JetStream, name string, within, every time.Duration, done func(uint64) bool, why func() string) (time.Time, error) {
	deadline := time.Now().Add(within)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return time.Time{}, fmt.Errorf("bench: stream %s: %w", name, err)
	}
	var last uint64
	for {
		info, err := s.Info(ctx)
		if err == nil {
			last = info.State.Msgs
			if done(last) {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("bench: stream %s still at %d messages after %s\n%s", name, last, within, why())
		}
		if err := ctxsleep.Sleep(ctx, every); err != nil {
			return time.Time{}, err
		}
	}
}

// results reads the latest result of every item of the run's batch.
func (f *fleet) results(ctx context.Context) ([]kftype.Result, error) {
	var rs []kftype.Result
	err := f.q.ReadResults(ctx, f.batch, func(r kftype.Result) error {
		rs = append(rs, r)
		return nil
	})
	return rs, err
}

func (f *fleet) workerLogs() string {
	var b strings.Builder
	for _, w := range f.workers {
		if t := w.logTail(); t != "" {
			fmt.Fprintf(&b, "--- worker %s log:\n%s\n", w.id, t)
		}
	}
	return b.String()
}

// jetstreamOf is a JetStream context on nc.
func jetstreamOf(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	return js, nil
}

func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// checkSucceeded verifies that every result of n items succeeded with a
// credential, and returns them.
func checkSucceeded(rs []kftype.Result, n int) error {
	if len(rs) != n {
		return fmt.Errorf("bench: %d results, want %d", len(rs), n)
	}
	bad := 0
	var first string
	for _, r := range rs {
		if r.Outcome != kftype.OutcomeSucceeded || r.CredentialID == "" || r.LeasedAt.IsZero() {
			bad++
			if first == "" {
				first = fmt.Sprintf("%s: %s %q (credential %q)", r.Item, r.Outcome, r.Error, r.CredentialID)
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("bench: %d of %d items did not succeed with a credential; first: %s", bad, n, first)
	}
	return nil
}
