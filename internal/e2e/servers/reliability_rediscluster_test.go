package servers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// Redis Cluster: three masters made with redis-cli --cluster create; the
// workers reach them through redis.cluster: true and the seed list in
// redis.url. A guarded batch runs with no loss, no duplicate and no
// over-use; every key of the pool lives in one slot on one node.
func TestReliabilityRedisCluster(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	cl := redistest.StartCluster(t)
	f := e2etest.GuardedFleet(t, "concurrency: 3", "")
	useRedis(f, fmt.Sprintf("url: %s\ncluster: true", cl.URL()))

	n := e2etest.ShortOrFull(120, 1000)
	start := time.Now()
	ids := f.Publish("cluster", "exec", n, e2etest.ItemJSON)
	workers := []*e2etest.Process{f.StartWorker("w1"), f.StartWorker("w2"), f.StartWorker("w3")}
	results := f.WaitResults("cluster", n, 3*time.Minute)
	took := time.Since(start)

	e2etest.StopWorkers(t, 30*time.Second, workers...)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The pool is in the cluster, in one slot on one node.
	cfg, err := config.Load(f.ConfigPath, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	prefix := "keyfleet:{" + cfg.Pool.Name + "}:"
	keys, slot := cl.OneSlotKeys(t, ctx, prefix)
	if len(keys) < 4 { // creds, fence, cred:key-a, cred:key-b at least
		t.Fatalf("only %d keys of the pool in the cluster: %v", len(keys), keys)
	}
	// And nowhere else: the fleet's stand-alone Redis stays empty.
	if left, err := f.Redis.Client(t).Keys(ctx, "*").Result(); err != nil || len(left) != 0 {
		t.Fatalf("the stand-alone Redis holds %v (%v): the workers did not use the cluster", left, err)
	}
	st := f.QueueStats()
	if st.Stream.Messages != 0 || st.Consumer.AckPending != 0 {
		t.Fatalf("queue not empty after the batch: %+v", st)
	}
	f.Account("Redis Cluster, 3 masters, 3 workers", ids, results, took, e2etest.Bounds{},
		fmt.Sprintf("pool in slot %d, %d keys on one node", slot, len(keys)))
}

// useRedis replaces the redis: section of the fleet's config file with the
// given YAML lines.
func useRedis(f *e2etest.Fleet, yaml string) {
	f.T.Helper()
	b, err := os.ReadFile(f.ConfigPath)
	if err != nil {
		f.T.Fatal(err)
	}
	old := fmt.Sprintf("redis:\n  url: %s\n", f.Redis.URL())
	if !strings.Contains(string(b), old) {
		f.T.Fatalf("no %q in the config:\n%s", old, b)
	}
	cfg := strings.Replace(string(b), old, "redis:\n"+e2etest.Indent(yaml, 2), 1)
	if err := os.WriteFile(f.ConfigPath, []byte(cfg), 0o600); err != nil {
		f.T.Fatal(err)
	}
	f.AttachLanes() // f.q's enqueues register their lanes in the cluster
}
