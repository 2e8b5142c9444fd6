package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// A stream made by the previous version (subjects <prefix>.<kind>, one
// durable consumer) holding its items: a worker of this version upgrades
// the stream (the batch subjects are added, nothing else changes) and
// works the old items off from the old durable as one more lane, while a
// producer of this version enqueues new batches beside them. Nothing is
// lost, and no operator step is needed (docs/waiting-model.md, "Upgrade").
func TestLegacyStreamDrains(t *testing.T) {
	ns := natstest.Start(t)
	nc := natstest.Connect(t, ns.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// What the previous version made.
	const prefix = queue.SubjectPrefixDefault
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KF", Description: "keyfleet work items", Subjects: []string{prefix + ".*"},
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "KF", jetstream.ConsumerConfig{
		Durable: queue.ConsumerDefault, Description: "keyfleet workers", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: prefix + ".*", AckWait: 30 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	const old = 40
	for i := range old {
		id := fmt.Sprintf("old-%03d", i)
		m := nats.NewMsg(prefix + ".sleep")
		m.Data = []byte(fmt.Sprintf(`{"id":%q,"ms":1}`, id))
		m.Header.Set(queue.HeaderItem, id)
		m.Header.Set(queue.HeaderBatch, "before-upgrade")
		m.Header.Set(queue.HeaderKind, "sleep")
		m.Header.Set(jetstream.MsgIDHeader, "before-upgrade/"+id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	f := newFleetConfig(t, ns.URL(), fleetOptions{
		Credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 4}",
		Worker:      "concurrency: 4\nshutdown_grace: 5s",
		Env:         []string{"KEY_A=" + testSecrets["key-a"]},
	})
	f.nats = ns
	f.nc = nc
	w := f.startWorker("w1")
	// A producer of this version enqueues beside the old items.
	path := f.writeInput("new.jsonl", jsonlItems(20, `{"id":%q,"ms":1}`))
	if r := f.producer(nil, "enqueue", "--kind", "sleep", "--batch", "after-upgrade", path); r.code != 0 {
		t.Fatalf("enqueue into an upgraded stream:\n%s", r)
	}
	if f.q, err = queue.Attach(ctx, nc, queue.Config{Stream: "KF"}); err != nil {
		t.Fatal(err)
	}
	for batch, n := range map[string]int{"before-upgrade": old, "after-upgrade": 20} {
		res := f.waitResults(batch, n, time.Minute)
		for id, r := range res {
			if r.Outcome != queue.OutcomeSucceeded {
				t.Errorf("%s/%s: %+v", batch, id, r)
			}
		}
	}
	si, err := js.Stream(ctx, "KF")
	if err != nil {
		t.Fatal(err)
	}
	if subs := si.CachedInfo().Config.Subjects; len(subs) != 2 || subs[0] != prefix+".*" || subs[1] != prefix+".b.>" {
		t.Errorf("upgraded stream's subjects: %v, want the old one and the batches'", subs)
	}
	// A result is written before its message is acked: the last acks may
	// still be on their way.
	testutil.WaitFor(t, "the stream to be empty", 10*time.Second, func() bool { return f.queueStats().Stream.Messages == 0 })
	w.signal(syscall.SIGTERM)
	w.wait(t, 20*time.Second)
}
