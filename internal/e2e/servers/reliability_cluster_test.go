package servers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// A 3-node NATS cluster with the queue's streams replicated on all three
// loses one node mid-run: the node that leads the JetStream meta group,
// the work stream and the workers' consumer, killed abruptly (no
// leadership handed over). The other two elect new leaders, the workers
// connected to the lost node reconnect to the others (nats.url lists all
// three), and every item finishes: 0 lost. The items the workers held at
// the loss run again (their acks found no leader and they came back after
// the election): at most one per worker slot, and in practice exactly that.
func TestReliabilityNATSClusterLosesLeader(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	n := e2etest.ShortOrFull(300, 1500)
	const workers, conc = 3, 2
	c := natstest.StartCluster(t, 3)
	f := newClusterFleet(t, c, "lease_ttl: 3s", fmt.Sprintf("concurrency: %d\nshutdown_grace: 5s\nmax_attempts: 20", conc),
		3*time.Second, "SLEEP=0.02")
	ids := f.Publish("cl", "exec", n, e2etest.ItemJSON)

	// One node leads everything the workers use (the stream, and the
	// batch's lane consumer, made here before they pull); that is the one
	// to lose.
	lane := f.Queue.LaneConsumerName("cl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.Queue.LaneConsumer(ctx, "cl"); err != nil {
		t.Fatal(err)
	}
	victim := c.GatherLeaders("KF", lane, 30*time.Second)
	results := f.WatchResults("cl", n)
	start := time.Now()
	var ws []*e2etest.Process
	for i := range workers {
		ws = append(ws, f.StartWorker(fmt.Sprintf("w%d", i+1)))
	}
	testutil.WaitFor(t, "a third of the items to finish", 2*time.Minute, func() bool { return results.Count() >= n/3 })
	led := fmt.Sprintf("meta %v, stream %v, consumer %v", c.MetaLeader() == victim, c.StreamLeader("KF") == victim,
		c.ConsumerLeader("KF", lane) == victim)
	at := results.Count()
	killed := time.Now()
	c.Kill(victim)
	newLeader := c.WaitStreamLeader("KF", time.Minute)
	elected := time.Since(killed)
	res := results.Wait(t, e2etest.ShortOrFull(3*time.Minute, 10*time.Minute))
	took := time.Since(start)
	e2etest.StopWorkers(t, 30*time.Second, ws...)
	f.WaitQueueEmpty()
	t.Logf("killed n%d (leader of: %s) at %d/%d results; n%d leads the stream after %s", victim, led, at, n, newLeader,
		elected.Round(time.Millisecond))
	f.Account("NATS 3-node cluster, R3 streams: leader node killed", ids, res, took, e2etest.Bounds{MaxDuplicates: workers * conc},
		fmt.Sprintf("killed the meta+stream+consumer leader at %d/%d; new stream leader in %s; done %s after the kill",
			at, n, elected.Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond)))
}

// newClusterFleet is newFleet on a NATS cluster: nats.url lists every
// node, the streams have 3 replicas, and the job is holdGuardScript over
// the two test keys.
func newClusterFleet(t *testing.T, c *natstest.Cluster, poolYAML, workerYAML string, ackWait time.Duration, env ...string) *e2etest.Fleet {
	t.Helper()
	f := newClusterFleetConfig(t, c, poolYAML, workerYAML, ackWait, env...)
	openClusterQueue(f, c, ackWait)
	return f
}

// newClusterFleetConfig is newClusterFleet without the test's own
// connection and queue handle (openClusterQueue), for a cluster that cannot
// take the queue's streams yet.
func newClusterFleetConfig(t *testing.T, c *natstest.Cluster, poolYAML, workerYAML string, ackWait time.Duration, env ...string) *e2etest.Fleet {
	t.Helper()
	f := e2etest.NewFleetConfig(t, c.URLs(), e2etest.GuardedOptions(poolYAML, workerYAML, fmt.Sprintf("replicas: 3\nack_wait: %s", ackWait), env...))
	f.WriteGuard(e2etest.HoldGuardScript)
	return f
}

// openClusterQueue connects the test to the cluster and opens the queue
// (R3 streams) as the workers do.
func openClusterQueue(f *e2etest.Fleet, c *natstest.Cluster, ackWait time.Duration) {
	t := f.T
	t.Helper()
	f.Conn = natstest.Connect(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if f.Queue, err = queue.Open(ctx, f.Conn, queue.Config{Stream: "KF", Replicas: 3, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	f.AttachLanes()
}
