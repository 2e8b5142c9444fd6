package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
)

// StartCluster gives three masters that share the slots: a cluster client
// reaches keys on every node, each node holds only its own slots' keys,
// and keys with one hash tag land in one slot.
func TestStartCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := len(c.Nodes()); got != redistest.ClusterNodes {
		t.Fatalf("%d nodes, want %d", got, redistest.ClusterNodes)
	}
	for _, n := range c.Nodes() {
		info, err := n.Client(t).ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_size:3") {
			t.Fatalf("CLUSTER INFO of %s: %v\n%s", n.Addr(), err, info)
		}
	}
	if want := "redis://" + strings.Join(c.Addrs(), ","); c.URL() != want {
		t.Fatalf("URL %q, want %q", c.URL(), want)
	}

	cc := c.Client(t)
	const n = 60
	for i := range n {
		if err := cc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Keys(ctx, "k*")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for addr, ks := range keys {
		total += len(ks)
		if len(ks) == 0 {
			t.Errorf("node %s holds no key", addr)
		}
	}
	if len(keys) != redistest.ClusterNodes || total != n {
		t.Fatalf("keys by node: %v; want %d keys spread over %d nodes", keys, n, redistest.ClusterNodes)
	}

	// One hash tag, one slot, one node.
	var slot int64 = -1
	for _, k := range []string{"x:{tag}:a", "x:{tag}:b", "{tag}"} {
		s, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot >= 0 && s != slot {
			t.Fatalf("%s in slot %d, want %d", k, s, slot)
		}
		slot = s
	}
}
