package natstest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/testutil/faultproxy"
	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// Account is the account JetStream assets live in when a server runs
// without accounts (every client of these tests).
const Account = server.DEFAULT_GLOBAL_ACCOUNT

// Cluster is an in-process JetStream cluster: n embedded nats-servers named
// n0, n1, ... joined by routes on loopback ports, each with its own store
// directory. A node can be shut down (gracefully, or killed abruptly) and
// restarted on the same ports and store, like a real node going down and
// coming back.
//
// Every route goes through a fault proxy (one per pair of nodes), so that
// Kill can cut a node off before it stops: an embedded server cannot
// crash, and a graceful shutdown hands its leaderships over first.
type Cluster struct {
	t     testing.TB
	nodes []*Server
	// routes[i][j] carries the route connections between node i and node
	// j when i opens them (see solicits), else it is nil.
	routes [][]*faultproxy.Proxy
}

// StartCluster starts an n-node JetStream cluster (n ≥ 1; 3 for
// replicated streams) and shuts it down in t.Cleanup. It returns once the
// cluster is ready for anything a test does (see WaitReady): a meta
// leader, every node a current peer of the meta group with JetStream
// enabled, and every node a placement peer of the leader, so that an R3
// stream can be created at once.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := StartClusterPartial(t, n, n)
	c.WaitReady(readyTimeout)
	return c
}

// StartClusterPartial builds an n-node cluster but starts only its first
// started nodes (0 ≤ started ≤ n), together, each up and with JetStream
// enabled; StartNode starts the others. It does not wait for a meta leader:
// fewer than a majority of the nodes cannot elect one, and more than that
// may still be electing one when it returns. URLs lists every node, started
// or not.
func StartClusterPartial(t testing.TB, n, started int) *Cluster {
	t.Helper()
	if n < 1 || started < 0 || started > n {
		t.Fatalf("natstest: a cluster of %d nodes, %d started", n, started)
	}
	// Each node binds its own free ports as it starts (a port chosen
	// for it beforehand may be taken by then, by another node among
	// others), and the route proxies to it learn its route port then,
	// holding the connections that come earlier.
	c := &Cluster{t: t, routes: make([][]*faultproxy.Proxy, n)}
	for i := range n {
		c.routes[i] = make([]*faultproxy.Proxy, n)
		for j := range n {
			if solicits(i, j, n) {
				c.routes[i][j] = faultproxy.StartPending(t)
			}
		}
	}
	for i := range n {
		var routes []*url.URL
		for _, p := range c.routes[i] {
			if p != nil {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: p.Addr()})
			}
		}
		o := launch.JetStreamOptions(t.TempDir())
		o.ServerName = fmt.Sprintf("n%d", i)
		o.Cluster = server.ClusterOpts{
			Name: "keyfleet-test",
			Host: "127.0.0.1",
			Port: -1,
			// A server tells the others the route address of every
			// server it meets, and they connect to an address they have
			// not configured (the real one, not their proxy to it):
			// routes that bypass the proxies, found at random moments
			// and then closed as duplicates, losing what they carried
			// (a reply now and then, seen as a JetStream request never
			// answered). An address that refuses connections stops it:
			// nothing listens on 127.0.0.2.
			Advertise: noRouteHere,
		}
		o.Routes = routes
		s := &Server{NATS: launch.NewNATS(o), t: t}
		if i >= started {
			// A node started later needs its client port now, for URLs:
			// it is held until the node starts.
			if err := s.Reserve(); err != nil {
				t.Fatalf("natstest: %v", err)
			}
		}
		c.nodes = append(c.nodes, s)
	}
	// Registered after the store directories (t.TempDir) and the proxies,
	// so that it runs before their cleanups: no node writes to a store
	// being removed.
	t.Cleanup(c.shutdownAll)
	// Start them together: each waits for its routes, not for the others
	// to be up.
	errs := make(chan error, started)
	for _, s := range c.nodes[:started] {
		go func() { errs <- s.NATS.Start() }()
	}
	for range started {
		if err := <-errs; err != nil {
			t.Fatalf("natstest: cluster node: %v", err)
		}
	}
	for i := range started {
		c.routeTo(i)
	}
	return c
}

// routeTo points the route proxies to node i at the route port it bound
// at its first start (launch.NATS keeps its ports for restarts).
func (c *Cluster) routeTo(i int) {
	c.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", c.nodes[i].Options().Cluster.Port)
	for j := range c.nodes {
		if p := c.routes[j][i]; p != nil && p.Target() == "" {
			if err := p.SetTarget(addr); err != nil {
				c.t.Fatalf("natstest: %v", err)
			}
		}
	}
}

// solicits reports whether node i of n configures the route to node j.
// One side of each pair does: configured on both, both connect at once,
// one connection is closed as a duplicate and its side connects again a
// second later, which is then how long a cluster takes to form. Every node
// configures one at least (JetStream requires it): its ring neighbour
// i+1; the other pairs are the lower-numbered node's.
func solicits(i, j, n int) bool {
	switch {
	case i == j:
		return false
	case j == (i+1)%n:
		return true
	case i == (j+1)%n:
		return false
	default:
		return i < j
	}
}

// noRouteHere is the route address the nodes advertise: one that refuses
// connections, so that all routes go through the proxies.
const noRouteHere = "127.0.0.2:1"

// readyTimeout bounds the helpers' waits for a ready server or cluster.
const readyTimeout = 30 * time.Second

func (c *Cluster) shutdownAll() {
	for _, s := range c.nodes {
		s.Shutdown()
	}
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Node returns node i (running or not).
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// URLs is every node's client URL, comma-separated: what nats.Connect and
// keyfleet's nats.url take for a cluster.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Shutdown stops node i gracefully and waits until it is down: it hands
// the groups it leads over to other nodes first, as a rolling restart does.
func (c *Cluster) Shutdown(i int) { c.nodes[i].Shutdown() }

// Kill stops node i abruptly, as a crash or a power cut would: its routes
// are cut first, so the other nodes hear nothing from it (no leadership
// handed over) and must notice the loss and elect new leaders by
// themselves; then it stops (its clients are disconnected and reconnect to
// the other nodes) and its route connections are reset.
func (c *Cluster) Kill(i int) {
	proxies := c.routesOf(i)
	for _, p := range proxies {
		p.Partition()
	}
	c.nodes[i].Shutdown()
	for _, p := range proxies {
		p.ResetAll() // drops whatever it said on its way out
	}
}

// Restart starts node i again (after Shutdown or Kill) on its ports and
// store, and waits until it has rejoined (see StartNode).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	for _, p := range c.routesOf(i) {
		p.Heal()
	}
	c.StartNode(i)
}

// StartNode starts node i: for the first time (a node StartClusterPartial
// left out), or again after Shutdown. When a majority of the nodes run
// then, it waits until the running nodes are ready (WaitReady), the new one
// a current member of the meta group; a minority cannot elect a leader, so
// then it waits only for the node to be up with JetStream enabled.
func (c *Cluster) StartNode(i int) {
	c.t.Helper()
	c.nodes[i].StartAgain()
	c.routeTo(i)
	if 2*c.running() > len(c.nodes) {
		c.WaitReady(readyTimeout)
	}
}

// running is the number of running nodes.
func (c *Cluster) running() int {
	n := 0
	for _, s := range c.nodes {
		if s.Server() != nil {
			n++
		}
	}
	return n
}

// routesOf is every route proxy to or from node i.
func (c *Cluster) routesOf(i int) []*faultproxy.Proxy {
	var ps []*faultproxy.Proxy
	for j := range c.nodes {
		for _, p := range []*faultproxy.Proxy{c.routes[i][j], c.routes[j][i]} {
			if p != nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// MetaLeader is the index of the running node that leads the JetStream
// meta group, or -1 while there is none.
func (c *Cluster) MetaLeader() int {
	return c.find(func(s *server.Server) bool { return s.JetStreamIsLeader() })
}

// StreamLeader is the index of the running node that leads stream, or -1.
func (c *Cluster) StreamLeader(stream string) int {
	return c.find(func(s *server.Server) bool { return s.JetStreamIsStreamLeader(Account, stream) })
}

// ConsumerLeader is the index of the running node that leads the consumer
// of stream, or -1.
func (c *Cluster) ConsumerLeader(stream, consumer string) int {
	return c.find(func(s *server.Server) bool { return s.JetStreamIsConsumerLeader(Account, stream, consumer) })
}

func (c *Cluster) find(leads func(*server.Server) bool) int {
	for i, n := range c.nodes {
		if s := n.Server(); s != nil && leads(s) {
			return i
		}
	}
	return -1
}

// WaitMetaLeader waits until a meta leader is elected and every running
// node is current with it, and returns the leader's index.
func (c *Cluster) WaitMetaLeader(timeout time.Duration) int {
	c.t.Helper()
	return c.waitLeader("a JetStream meta leader", timeout, func() int {
		l := c.MetaLeader()
		for _, n := range c.nodes {
			if s := n.Server(); s != nil && !s.JetStreamIsCurrent() {
				return -1
			}
		}
		return l
	})
}

// WaitStreamLeader waits until stream has a leader and returns its index.
func (c *Cluster) WaitStreamLeader(stream string, timeout time.Duration) int {
	c.t.Helper()
	return c.waitLeader("a leader of stream "+stream, timeout, func() int { return c.StreamLeader(stream) })
}

// WaitConsumerLeader waits until the consumer has a leader and returns its
// index.
func (c *Cluster) WaitConsumerLeader(stream, consumer string, timeout time.Duration) int {
	c.t.Helper()
	return c.waitLeader("a leader of consumer "+stream+"/"+consumer, timeout,
		func() int { return c.ConsumerLeader(stream, consumer) })
}

func (c *Cluster) waitLeader(what string, timeout time.Duration, leader func() int) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l := leader(); l >= 0 {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: no %s within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GatherLeaders waits for a meta leader and leaders of stream and of its
// consumer, moves the latter two to the meta leader and returns that node:
// the one whose loss loses every leader. It fails the test if it cannot.
func (c *Cluster) GatherLeaders(stream, consumer string, timeout time.Duration) int {
	c.t.Helper()
	node := c.WaitMetaLeader(timeout)
	c.WaitStreamLeader(stream, timeout)
	c.WaitConsumerLeader(stream, consumer, timeout)
	if err := c.MoveStreamLeader(stream, node, timeout); err != nil {
		c.t.Fatal(err)
	}
	if err := c.MoveConsumerLeader(stream, consumer, node, timeout); err != nil {
		c.t.Fatal(err)
	}
	return node
}

// MoveStreamLeader asks the stream's leader to step down in favour of node
// to (the JetStream API's preferred placement) and waits until to leads.
func (c *Cluster) MoveStreamLeader(stream string, to int, timeout time.Duration) error {
	return c.moveLeader("$JS.API.STREAM.LEADER.STEPDOWN."+stream, to, timeout,
		func() int { return c.StreamLeader(stream) })
}

// MoveConsumerLeader does the same for a consumer of stream.
func (c *Cluster) MoveConsumerLeader(stream, consumer string, to int, timeout time.Duration) error {
	return c.moveLeader("$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, to, timeout,
		func() int { return c.ConsumerLeader(stream, consumer) })
}

func (c *Cluster) moveLeader(subject string, to int, timeout time.Duration, leader func() int) error {
	if leader() == to {
		return nil
	}
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("natstest: connect: %w", err)
	}
	defer nc.Close()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": c.nodes[to].Options().ServerName}})
	deadline := time.Now().Add(timeout)
	for {
		msg, err := nc.Request(subject, req, time.Until(deadline))
		if err != nil {
			return fmt.Errorf("natstest: %s: %w", subject, err)
		}
		var resp struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return fmt.Errorf("natstest: %s: reply %q: %w", subject, msg.Data, err)
		}
		if resp.Error != nil {
			return fmt.Errorf("natstest: %s: %s", subject, resp.Error.Description)
		}
		for leader() < 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if leader() == to {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: %s: node %d does not lead within %s (leader: %d)", subject, to, timeout, leader())
		}
	}
}
