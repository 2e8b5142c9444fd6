package natstest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// A cluster started with a node missing cannot place an R3 stream; once
// StartNode has started the last node and returned, it can, at once.
func TestClusterPartialThenStartNode(t *testing.T) {
	c := natstest.StartClusterPartial(t, 3, 2)
	if c.Node(2).Server() != nil {
		t.Fatal("node 2 runs before StartNode")
	}
	nc := natstest.Connect(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r3 := jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}
	// Two nodes cannot place it: they answer "no suitable peers" once they
	// have elected a meta leader, and nothing before (no need to wait for
	// that here: an election among two can take seconds).
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	_, err := js.CreateStream(rctx, r3)
	rcancel()
	var apiErr *jetstream.APIError
	if err == nil || errors.As(err, &apiErr) && apiErr.ErrorCode != 10005 {
		t.Fatalf("R3 stream on 2 of 3 nodes: want err_code 10005 (no suitable peers) or no answer, got %v", err)
	}
	start := time.Now()
	c.StartNode(2)
	t.Logf("StartNode(2) took %s", time.Since(start).Round(time.Millisecond))
	if _, err := js.CreateStream(ctx, r3); err != nil {
		t.Fatalf("R3 stream once every node runs: %v", err)
	}
	if got := strings.Count(c.URLs(), ","); got != 2 {
		t.Fatalf("URLs() = %q, want 3 URLs", c.URLs())
	}
}
