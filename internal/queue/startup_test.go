package queue_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// r3 is a queue whose streams need all three nodes of a cluster. A
// request a cluster without a meta leader leaves unanswered is given up
// after a second, to be tried again.
var r3 = queue.Config{Replicas: 3, AckWait: 5 * time.Second, RequestTimeout: time.Second}

// connectCluster connects to every node of c (started or not).
func connectCluster(t *testing.T, c *natstest.Cluster) *nats.Conn {
	t.Helper()
	nc := natstest.Connect(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	return nc
}

// retries records what Startup.Waiting is told.
type retries struct {
	mu      sync.Mutex
	errs    []error
	first   chan struct{} // closed at the first retry
	noPeers chan struct{} // closed at the first retry after "no suitable peers"
}

func newRetries() *retries { return &retries{first: make(chan struct{}), noPeers: make(chan struct{})} }

func (r *retries) waiting(err error, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
	if len(r.errs) == 1 {
		close(r.first)
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) && ae.ErrorCode == 10005 && !r.sawNoPeers() {
		close(r.noPeers)
	}
}

func (r *retries) sawNoPeers() bool { return testutil.Closed(r.noPeers) }

func (r *retries) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// Open with R3 streams on a cluster whose third node is not up yet waits,
// retrying: first while the two nodes elect a meta leader (requests go
// unanswered), then while the leader has no third peer to place replicas
// on ("no suitable peers"); it succeeds once the node has started.
func TestStartupOpenWaitsForTheCluster(t *testing.T) {
	c := natstest.StartClusterPartial(t, 3, 2)
	nc := connectCluster(t, c)
	r := newRetries()
	type result struct {
		q   *queue.Queue
		err error
	}
	done := make(chan result, 1)
	go func() {
		q, err := queue.Startup{Timeout: time.Minute, Waiting: r.waiting}.Open(context.Background(), nc, r3)
		done <- result{q, err}
	}()
	select {
	case <-r.noPeers:
	case res := <-done:
		t.Fatalf("Open returned on 2 of 3 nodes without waiting: %v", res.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Open did not retry after \"no suitable peers\" within 30s (retried after: %v)", r.all())
	}
	c.StartNode(2)
	started := time.Now()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Open did not return within 30s of the third node's start (retried after: %v)", r.all())
	}
	if res.err != nil {
		t.Fatalf("Open after the third node started: %v", res.err)
	}
	errs := r.all()
	for _, err := range errs {
		if !queue.Transient(err) {
			t.Errorf("retried after an error that is not transient: %v", err)
		}
	}
	t.Logf("retried %d times (first: %v); Open returned %s after the third node was up",
		len(errs), errs[0], time.Since(started).Round(time.Millisecond))
	info, err := res.q.JetStream().Stream(context.Background(), res.q.Config().Stream)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(info.CachedInfo().Cluster.Replicas) + 1; got != 3 {
		t.Fatalf("work stream on %d nodes, want 3", got)
	}
}

// Past the bound Open gives up with the last error and says how long it
// waited.
func TestStartupOpenGivesUpAfterTheBound(t *testing.T) {
	c := natstest.StartClusterPartial(t, 3, 2)
	nc := connectCluster(t, c)
	const bound = time.Second
	start := time.Now()
	_, err := queue.Startup{Timeout: bound}.Open(context.Background(), nc, r3)
	took := time.Since(start)
	// The last error: "no suitable peers" if the two nodes have elected a
	// meta leader by then, else an unanswered request.
	if err == nil || !strings.HasPrefix(err.Error(), "JetStream not ready after ") || !queue.Transient(err) {
		t.Fatalf("want \"JetStream not ready after ...\" wrapping a transient error, got %v", err)
	}
	if took < bound || took > bound+queue.AttemptTimeoutDefault {
		t.Fatalf("gave up after %s, want between %s and %s", took, bound, bound+queue.AttemptTimeoutDefault)
	}
	t.Logf("%s: %v", took.Round(time.Millisecond), err)

	// 0: one attempt, its error as it is.
	start = time.Now()
	_, err = queue.Startup{Attempt: time.Second}.Open(context.Background(), nc, r3)
	if err == nil || strings.Contains(err.Error(), "not ready after") || time.Since(start) > 2*time.Second {
		t.Fatalf("Timeout 0: want the error of one attempt of at most 1s, got %v after %s", err, time.Since(start))
	}
}

// A permission denied is not waited out: the request only times out (the
// refusal comes on the connection), and Open says why at its first
// attempt.
func TestStartupOpenPermissionDenied(t *testing.T) {
	s := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{"$JS.API.>"}},
		}}}
	})
	nc := natstest.Connect(t, s.URL(), nats.UserInfo("u", "p"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	r := newRetries()
	_, err := queue.Startup{Timeout: time.Minute, Attempt: 500 * time.Millisecond, Waiting: r.waiting}.Open(context.Background(), nc, queue.Config{})
	if !errors.Is(err, nats.ErrPermissionViolation) || queue.Transient(err) {
		t.Fatalf("want a permissions violation, not transient; got %v", err)
	}
	if n := len(r.all()); n != 0 {
		t.Fatalf("retried %d times", n)
	}
}

// The caller's context ends the wait.
func TestStartupStopsWithItsContext(t *testing.T) {
	c := natstest.StartClusterPartial(t, 3, 2)
	nc := connectCluster(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	r := newRetries()
	done := make(chan error, 1)
	go func() {
		_, err := queue.Startup{Timeout: time.Minute, Waiting: r.waiting}.Open(ctx, nc, r3)
		done <- err
	}()
	<-r.first
	cancel()
	err := testutil.Receive(t, done, 10*time.Second, "Open still waiting 10s after its context was cancelled")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}
