package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/batchlanes"
	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/lanes"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/internal/worker"
)

// The registry tells the truth while items run: a worker announces its busy
// slots and its done count when they change (about once a second), not only
// every worker.heartbeat. With a heartbeat of a minute, everything seen here
// after the first announcement came from such a change.
func TestRegistryShowsBusyAndDoneWhileItemsRun(t *testing.T) {
	ns, rs := natstest.Start(t), redistest.Start(t)
	cfgFile := filepath.Join(t.TempDir(), "kf.yaml")
	yaml := fmt.Sprintf(`nats: {url: %q}
redis: {url: %q}
pool:
  name: %s
  credentials:
    - {id: key-a, secret_env: HB_KEY_A, max_concurrent: 2}
worker: {concurrency: 2, heartbeat: 1m, shutdown_grace: 5s}
queue: {stream: HB}
`, ns.URL(), rs.URL(), redistest.UniqueName(t))
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgFile, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := worker.New(worker.Options{Config: cfg, ID: "hb-1", Getenv: func(string) string { return "sk-heartbeat" }})
	if err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("worker run: %v", err)
		}
	})

	nc := natstest.Connect(t, ns.URL())
	q, err := queue.Attach(ctx, nc, queue.Config{Stream: "HB"})
	if err != nil {
		t.Fatal(err)
	}
	// Its enqueues register their lanes, as the producer's do.
	lw, err := batchlanes.New(lanes.New(rs.Client(t), "HB"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.SetLaneWriter(lw)
	registry := func() queue.WorkerInfo {
		ws, err := q.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 {
			return queue.WorkerInfo{}
		}
		return ws[0]
	}
	testutil.WaitFor(t, "hb-1 in the registry", 10*time.Second, func() bool { return registry().ID == "hb-1" })

	const runFor = 2 * time.Second
	var items []kftype.Item
	for i := range 2 {
		id := fmt.Sprintf("slow-%d", i)
		items = append(items, kftype.Item{ID: id, Batch: "hb", Kind: "sleep", Payload: fmt.Appendf(nil, `{"id":%q,"ms":%d}`, id, runFor.Milliseconds())})
	}
	published := time.Now()
	if _, err := q.Publish(ctx, items...); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the registry to show both slots busy", 10*time.Second, func() bool { return registry().Busy == 2 })
	if took := time.Since(published); took >= runFor {
		t.Fatalf("busy 2/2 showed only %s after the items were enqueued, when they were over", took)
	}
	testutil.WaitFor(t, "the registry to show 2 done and 0 busy", 10*time.Second, func() bool {
		r := registry()
		return r.Done == 2 && r.Busy == 0 && r.Failed == 0
	})
}
