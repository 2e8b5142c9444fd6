package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Cluster is a Redis Cluster of three masters and no replicas, each a
// redis-server process on loopback, made into a cluster with
// `redis-cli --cluster create` and stopped in t.Cleanup.
type Cluster struct {
	nodes []*Server
}

// ClusterNodes is the number of masters StartCluster starts.
const ClusterNodes = 3

// CLIBinary returns the path of redis-cli (REDIS_CLI_BIN or PATH) or an
// error that says how to get one.
func CLIBinary() (string, error) { return launch.RedisCLIBinary() }

// StartCluster starts three redis-server processes in cluster mode, joins
// them into one cluster covering all 16384 slots, and waits until every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := CLIBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	for i := range ClusterNodes {
		o := launch.RedisOptions{Bin: bin, Dir: t.TempDir(), Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-announce-ip", "127.0.0.1",
		}}
		for _, opt := range opts {
			opt(&o)
		}
		var lastErr error
		var r *launch.Redis
		for try := 0; try < 10 && r == nil; try++ {
			if o.Port, lastErr = clusterPort(); lastErr != nil {
				continue
			}
			// StartRedis on a given port returns its handle with the
			// error (the port was taken meanwhile): only a started node
			// is kept, else the next try picks another port.
			if started, err := launch.StartRedis(context.Background(), o); err == nil {
				r = started
			} else {
				lastErr = err
			}
		}
		if r == nil {
			t.Fatalf("redistest: cluster node %d: %v", i, lastErr)
		}
		s := &Server{t: t, r: r}
		t.Cleanup(s.Stop)
		c.nodes = append(c.nodes, s)
	}

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if pw := c.nodes[0].r.Password(); pw != "" {
		args = append(args, "-a", pw, "--no-auth-warning")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "All 16384 slots covered") {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitOK(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// clusterPort returns a port p such that p (clients) and p+10000 (the
// cluster bus, which redis-server derives from it) were both free on
// 127.0.0.1 a moment ago.
func clusterPort() (int, error) {
	var lastErr error
	for range 50 {
		p := 20000 + rand.IntN(55535-20000) // p+10000 stays below 65536
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			lastErr = err
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		_ = a.Close()
		if err != nil {
			lastErr = err
			continue
		}
		_ = b.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair (p, p+10000): %w", lastErr)
}

// waitOK waits until every node says cluster_state:ok and knows all the
// masters, so that a client sees the whole slot map at once.
func (c *Cluster) waitOK(ctx context.Context) error {
	for _, s := range c.nodes {
		n := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.r.Password(), PoolSize: 1})
		var info string
		var err error
		for {
			info, err = n.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.nodes))) &&
				strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			select {
			case <-ctx.Done():
				_ = n.Close()
				return fmt.Errorf("cluster node %s not ok: %w (last CLUSTER INFO: %q, error: %v)",
					s.Addr(), ctx.Err(), info, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = n.Close()
	}
	return nil
}

// Nodes are the cluster's servers.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr()
	}
	return out
}

// URL is a redis:// URL listing every node as a seed, comma separated
// (the form config's redis.url takes with redis.cluster: true).
func (c *Cluster) URL() string {
	auth := ""
	if pw := c.nodes[0].r.Password(); pw != "" {
		auth = ":" + pw + "@"
	}
	return "redis://" + auth + strings.Join(c.Addrs(), ",")
}

// Client returns a cluster client seeded with every node, closed in
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Password: c.nodes[0].r.Password()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Keys returns every key matching pattern on every node, by node address.
func (c *Cluster) Keys(ctx context.Context, pattern string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, s := range c.nodes {
		n := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.r.Password(), PoolSize: 1})
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out[s.Addr()] = append(out[s.Addr()], iter.Val())
		}
		err := iter.Err()
		_ = n.Close()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", s.Addr(), err)
		}
	}
	return out, nil
}

// OneSlotKeys returns every key that starts with prefix, sorted, and the
// slot of prefix (of its hash tag). It fails the test unless the keys all
// live on one node and hash to that slot.
func (c *Cluster) OneSlotKeys(t testing.TB, ctx context.Context, prefix string) ([]string, int64) {
	t.Helper()
	cc := c.Client(t)
	slot, err := cc.ClusterKeySlot(ctx, prefix).Result()
	if err != nil {
		t.Fatal(err)
	}
	byNode, err := c.Keys(ctx, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if len(byNode) != 1 {
		t.Fatalf("the keys of %s are on %d nodes, want 1: %v", prefix, len(byNode), byNode)
	}
	var all []string
	for _, ks := range byNode {
		all = append(all, ks...)
	}
	sort.Strings(all)
	for _, k := range all {
		if s, err := cc.ClusterKeySlot(ctx, k).Result(); err != nil || s != slot {
			t.Fatalf("key %s in slot %d (%v), want %d (the slot of %s)", k, s, err, slot, prefix)
		}
	}
	return all, slot
}
