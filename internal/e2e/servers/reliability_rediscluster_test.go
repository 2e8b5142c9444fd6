package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// Redis Cluster: three masters made with redis-cli --cluster create; the
// workers reach them through redis.cluster: true and the seed list in
// redis.url. A guarded batch runs with no loss, no duplicate and no
// over-use; every key of the pool lives in one slot on one node.
func TestReliabilityRedisCluster(t *testing.T) {
	longWaitingScenario(t)
	cl := redistest.StartCluster(t)
	f := guardedFleet(t, "concurrency: 3", "")
	f.useRedis(fmt.Sprintf("url: %s\ncluster: true", cl.URL()))

	n := size(120, 1000)
	start := time.Now()
	ids := f.publish("cluster", "exec", n, itemJSON)
	workers := []*proc{f.startWorker("w1"), f.startWorker("w2"), f.startWorker("w3")}
	results := f.waitResults("cluster", n, 3*time.Minute)
	took := time.Since(start)

	stopFleet(t, 30*time.Second, workers...)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The pool is in the cluster, in one slot on one node.
	cfg, err := config.Load(f.cfg, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	prefix := "keyfleet:{" + cfg.Pool.Name + "}:"
	keys, slot := cl.OneSlotKeys(t, ctx, prefix)
	if len(keys) < 4 { // creds, fence, cred:key-a, cred:key-b at least
		t.Fatalf("only %d keys of the pool in the cluster: %v", len(keys), keys)
	}
	// And nowhere else: the fleet's stand-alone Redis stays empty.
	if left, err := f.redis.Client(t).Keys(ctx, "*").Result(); err != nil || len(left) != 0 {
		t.Fatalf("the stand-alone Redis holds %v (%v): the workers did not use the cluster", left, err)
	}
	st := f.queueStats()
	if st.Stream.Messages != 0 || st.Consumer.AckPending != 0 {
		t.Fatalf("queue not empty after the batch: %+v", st)
	}
	f.account("Redis Cluster, 3 masters, 3 workers", ids, results, took, bounds{},
		fmt.Sprintf("pool in slot %d, %d keys on one node", slot, len(keys)))
}

// useRedis replaces the redis: section of the fleet's config file with the
// given YAML lines.
func (f *fleet) useRedis(yaml string) {
	f.t.Helper()
	b, err := os.ReadFile(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	old := fmt.Sprintf("redis:\n  url: %s\n", f.redis.URL())
	if !strings.Contains(string(b), old) {
		f.t.Fatalf("no %q in the config:\n%s", old, b)
	}
	cfg := strings.Replace(string(b), old, "redis:\n"+indent(yaml, 2), 1)
	if err := os.WriteFile(f.cfg, []byte(cfg), 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.attachLanes() // f.q's enqueues register their lanes in the cluster
}
