package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Scenario 13f: a deadline batch through the Batch API (docs/batch-api.md).
// Real worker processes (2 × 8 slots, the http kind of provider openai)
// against the strict stand-in of OpenAI, whose two keys take 50 real-time
// requests per second each (the pool is told so) and whose provider
// batches take 5 s. (a) A real-time batch of 600 items runs alone: its
// items/s. (b) A batch of 10,000 items enqueued with --deadline 24h and a
// second real-time batch of 600 items run at once: the provider requests
// the deadline batch cost per item (file uploads, batch creations, polls,
// output downloads: the stand-in's Files and Batch API counts; target ≤
// 0.01), the share of its items that came via the Batch API, and the
// real-time batch's items/s beside it ÷ alone: the real-time capacity of
// the keys left to other batches (Batch API calls take no lease).
var batchAPIScenario = &scenario{
	name:  "batchapi",
	title: "13f. Deadline batches through the Batch API",
	figures: []figSpec{
		{id: "requests_per_item", name: "(b) provider requests per item of the deadline batch (uploads, creations, polls, downloads)", unit: "per item", goal: atMost(0.01)},
		{id: "via_batch", name: "(b) its items via the Batch API", unit: "fraction", goal: atLeast(0.95)},
		{id: "provider_batches", name: "(b) provider batches created", unit: "batches"},
		{id: "deadline_wall", name: "(b) enqueued → every result (each provider batch takes 5 s at the stand-in)", unit: "s"},
		{id: "rt_ratio", name: "real-time batch's items/s beside the deadline batch ÷ alone", unit: "fraction", goal: atLeast(0.9)},
		{id: "rt_alone", name: "(a) real-time batch alone (keys: 2 × 50/s)", unit: "items/s"},
		{id: "rt_beside", name: "(b) real-time batch beside the deadline batch", unit: "items/s"},
	},
	run: runBatchAPI,
}

func runBatchAPI(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	n, nrt := pick(r.quick, 10_000, 1_000), pick(r.quick, 600, 200)
	ids := credIDs("ba", 2)
	keys := make([]fakeapi.Key, len(ids))
	for i, id := range ids {
		keys[i] = fakeapi.Key{Secret: secretOf(id), Rate: ratelimit.Limit{N: 50, Period: time.Second}}
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: keys, BatchDelay: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	fs := fleetSpec{concurrency: 8, httpURL: srv.URL, provider: provider.OpenAI, batchAPI: "{poll: 500ms, margin: 1h}"}
	for _, id := range ids {
		fs.creds = append(fs.creds, credSpec{id: id, max: 8, rate: "50/s"})
	}
	f, err := e.newFleet(ctx, "bapi", fs)
	if err != nil {
		return nil, err
	}
	defer f.close(ctx)
	for i := range 2 {
		if _, _, err := f.startReady(ctx, fmt.Sprintf("w%d", i+1)); err != nil {
			return nil, err
		}
	}
	// (a) the real-time batch alone.
	alone, err := f.realTimeRate(ctx, "rt-alone", nrt)
	if err != nil {
		return nil, err
	}
	// (b) the deadline batch and a real-time batch at once.
	m, err := e.meter(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := f.enqueueFile(ctx, "deadline", n, start.Add(24*time.Hour)); err != nil {
		return nil, err
	}
	beside, err := f.realTimeRate(ctx, "rt-beside", nrt)
	if err != nil {
		return nil, err
	}
	if err := f.waitBatchAPI(ctx, "deadline", n, 5*time.Minute); err != nil {
		return nil, err
	}
	wall := time.Since(start)
	via := 0
	if err := f.q.ReadResults(ctx, "deadline", func(r kftype.Result) error {
		if r.Outcome == kftype.OutcomeSucceeded && r.Via != "" {
			via++
		}
		return nil
	}); err != nil {
		return nil, err
	}
	workersCPU, err := f.stopWorkers(ctx)
	if err != nil {
		return nil, err
	}
	use, err := m.done(ctx, "keyfleet: 2 workers, 10,000 items via the Batch API beside 600 in real time", n+nrt, wall, map[string]float64{"workers": workersCPU})
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	var calls, created int64
	for _, k := range api.Stats().Keys {
		b := k.Batch
		calls += b.FilesCreated + b.FileReads + b.Created + b.Cancelled + b.Polls + b.Lists + b.Results
		created += b.Created
	}
	smp.values["requests_per_item"] = float64(calls) / float64(n)
	smp.values["via_batch"] = float64(via) / float64(n)
	smp.values["provider_batches"] = float64(created)
	smp.values["deadline_wall"] = wall.Seconds()
	smp.values["rt_alone"], smp.values["rt_beside"] = alone, beside
	if alone > 0 {
		smp.values["rt_ratio"] = beside / alone
	}
	return smp, nil
}

// enqueueFile enqueues n chat requests of gpt-4o-mini into batch as
// producer enqueue does (an OpenAI batch file; with a deadline when
// deadline is set).
func (f *fleet) enqueueFile(ctx context.Context, batch string, n int, deadline time.Time) error {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%06d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Summarise item %d in a line."}],"max_completion_tokens":16}}`+"\n", batch, i, i)
	}
	path := filepath.Join(f.e.dir, "cfg", f.tag+"-"+batch+".jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep, err := enqueue.Run(ctx, f.q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "http", Batch: batch,
		Format: provider.FormatOpenAIBatch, Provider: provider.OpenAI, Deadline: deadline})
	if err != nil {
		return fmt.Errorf("bench: enqueue %s: %w", batch, err)
	}
	if rep.New != n {
		return fmt.Errorf("bench: enqueue %s: %d new of %d", batch, rep.New, n)
	}
	return nil
}

// realTimeRate enqueues n real-time items into batch and returns their
// items/s from the enqueue to the last result.
func (f *fleet) realTimeRate(ctx context.Context, batch string, n int) (float64, error) {
	start := time.Now()
	if err := f.enqueueFile(ctx, batch, n, time.Time{}); err != nil {
		return 0, err
	}
	if err := f.waitBatchAPI(ctx, batch, n, 3*time.Minute); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// waitBatchAPI waits until n items of batch have a result.
func (f *fleet) waitBatchAPI(ctx context.Context, batch string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got := 0
		if err := f.q.ItemsWithResults(ctx, batch, func(string) { got++ }); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: batch %s: %d of %d results after %s\n%s", batch, got, n, within, f.workerLogs())
		}
		if err := ctxsleep.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
