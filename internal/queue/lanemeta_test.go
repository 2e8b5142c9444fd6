package queue_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// A lane's consumer says whose it is, so that `nats consumer ls` reads like
// `producer batch list`: its description names the batch (and scope),
// escaped for a terminal, and its metadata holds both exactly
// (keyfleet.batch, keyfleet.scope). A lane's consumer with another
// description and no metadata (made by hand, say) is brought in line by a
// worker's handle, once: the keys the server adds to the metadata of its
// own (_nats.*) do not make it write again.
func TestLaneConsumerNamesItsBatch(t *testing.T) {
	q, nc := open(t)
	const batch, scope = "docs-17083252 \x1b[31m", "gpt-4o"
	lanes := []string{batch, kftype.Lane(batch, scope)}
	// The batch's own lane, made by hand.
	old := jetstream.ConsumerConfig{
		Durable: q.LaneConsumerName(batch), Description: "keyfleet workers, one batch", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: q.Config().AckWait, MaxDeliver: -1,
		FilterSubject: q.Config().SubjectPrefix + ".b." + queue.Token(batch) + ".*",
		MaxAckPending: queue.ConsumerMaxAckPending, MaxWaiting: queue.ConsumerMaxWaiting,
	}
	if _, err := q.JetStream().CreateConsumer(ctx(t), q.Config().Stream, old); err != nil {
		t.Fatal(err)
	}
	for _, lane := range lanes {
		if _, err := q.LaneConsumer(ctx(t), lane); err != nil {
			t.Fatal(err)
		}
	}
	w := watchAPIWrites(t, nc)
	w.settle(t, q)
	w.reset()
	for range 2 {
		for _, lane := range lanes {
			if _, err := q.LaneConsumer(ctx(t), lane); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.settle(t, q)
	if writes, _ := w.counts(); len(writes) != 0 {
		t.Fatalf("opening lanes whose consumers are as configured wrote %v", writes)
	}

	want := map[string]struct {
		desc string
		meta map[string]string
	}{
		batch: {`keyfleet batch docs-17083252 \x1b[31m`, map[string]string{queue.MetaBatch: batch}},
		kftype.Lane(batch, scope): {`keyfleet batch docs-17083252 \x1b[31m, scope gpt-4o`,
			map[string]string{queue.MetaBatch: batch, queue.MetaScope: scope}},
	}
	for _, lane := range lanes {
		c, err := q.JetStream().Consumer(ctx(t), q.Config().Stream, q.LaneConsumerName(lane))
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		w := want[lane]
		if cfg.Description != w.desc {
			t.Errorf("lane %q: description %q, want %q", lane, cfg.Description, w.desc)
		}
		for k, v := range w.meta {
			if cfg.Metadata[k] != v {
				t.Errorf("lane %q: metadata %s = %q, want %q (all: %q)", lane, k, cfg.Metadata[k], v, cfg.Metadata)
			}
		}
		if _, ok := cfg.Metadata[queue.MetaScope]; ok && len(w.meta) == 1 {
			t.Errorf("lane %q without a scope has %s: %q", lane, queue.MetaScope, cfg.Metadata)
		}
		var server bool
		for k := range cfg.Metadata {
			server = server || strings.HasPrefix(k, "_nats.")
		}
		if !server {
			t.Logf("the server added no metadata of its own: %q", cfg.Metadata)
		}
	}
}

// A long ID is cut in the description (whole characters), never in the
// metadata.
func TestLaneDescriptionOfALongID(t *testing.T) {
	q, _ := open(t)
	batch := strings.Repeat("é", 250)
	c, err := q.LaneConsumer(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	if !strings.HasPrefix(cfg.Description, "keyfleet batch éé") || !strings.HasSuffix(cfg.Description, "é…") || len(cfg.Description) > 250 {
		t.Errorf("description of a 600-byte batch ID: %q", cfg.Description)
	}
	if cfg.Metadata[queue.MetaBatch] != batch {
		t.Errorf("metadata holds %q, want the whole ID", cfg.Metadata[queue.MetaBatch])
	}
}
