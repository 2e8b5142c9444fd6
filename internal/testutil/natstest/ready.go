package natstest

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// WaitReady waits until the running nodes are ready for what the tests do
// (see Ready) and fails the test with the reason if they are not within
// timeout.
func (c *Cluster) WaitReady(timeout time.Duration) {
	c.t.Helper()
	if err := waitUntil(timeout, c.Ready); err != nil {
		c.t.Fatalf("natstest: cluster not ready within %s: %v", timeout, err)
	}
}

// Ready reports, by a nil error, that the running nodes form a JetStream
// cluster that can take any request at once; otherwise the error says what
// is missing. Ready means, read from each server's own state:
//
//   - JetStream is enabled and clustered on every running node;
//   - one of them leads the meta group, and every other one is a current
//     (caught up, recently seen, online) peer of it, by the leader's Jsz;
//   - every node is current with the leader by its own account
//     (JetStreamIsCurrent), and names the same leader;
//   - the leader has every running node's statistics, so it can place
//     replicas on it (JetStreamClusterPeers): without them creating an R3
//     stream fails with "no suitable peers for placement".
//
// Nodes that are down are not required; a stream placed while one is down
// must fit on the others.
func (c *Cluster) Ready() error {
	var up []*server.Server
	leader := (*server.Server)(nil)
	for _, n := range c.nodes {
		s := n.Server()
		if s == nil {
			continue
		}
		up = append(up, s)
		switch {
		case !s.JetStreamEnabled():
			return fmt.Errorf("%s: JetStream not enabled yet", s.Name())
		case !s.JetStreamIsClustered():
			return fmt.Errorf("%s: JetStream not clustered yet", s.Name())
		case s.JetStreamIsLeader():
			if leader != nil {
				return fmt.Errorf("%s and %s both lead the meta group", leader.Name(), s.Name())
			}
			leader = s
		}
	}
	if len(up) == 0 {
		return errors.New("no node is running")
	}
	if leader == nil {
		return errors.New("no meta leader")
	}
	jsz, err := leader.Jsz(nil)
	if err != nil || jsz.Meta == nil {
		return fmt.Errorf("%s: meta group info: %v", leader.Name(), err)
	}
	for _, s := range up {
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("%s: not current with the meta leader %s", s.Name(), leader.Name())
		}
		if s == leader {
			continue
		}
		i := slices.IndexFunc(jsz.Meta.Replicas, func(p *server.PeerInfo) bool { return p.Name == s.Name() })
		if i < 0 || !jsz.Meta.Replicas[i].Current || jsz.Meta.Replicas[i].Offline {
			return fmt.Errorf("%s: not a current peer of the meta leader %s", s.Name(), leader.Name())
		}
		if z, err := s.Jsz(nil); err != nil || z.Meta == nil || z.Meta.Leader != leader.Name() {
			return fmt.Errorf("%s: does not know the meta leader %s yet", s.Name(), leader.Name())
		}
	}
	peers := leader.JetStreamClusterPeers()
	for _, s := range up {
		if !slices.Contains(peers, s.Name()) {
			return fmt.Errorf("%s: the meta leader %s cannot place replicas on it yet (placement peers: %v)",
				s.Name(), leader.Name(), peers)
		}
	}
	return nil
}

// waitUntil polls ready until it returns nil, and returns its last error
// if that does not happen within timeout. The servers have no event for
// these states, so it polls their state often (cheap, in process).
func waitUntil(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}
