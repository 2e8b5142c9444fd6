package queue_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// A batch's lane without a scope is the batch ID itself; a scoped lane
// splits back into its batch and scope, whatever bytes a batch ID holds.
func TestLaneParts(t *testing.T) {
	for _, batch := range []string{"b", "items-3f2a9c1b", "b/1 ü", "a\x1fb", " lead", "x.y*>"} {
		if got := kftype.Lane(batch, ""); got != batch {
			t.Errorf("Lane(%q, \"\") = %q, want the batch ID", batch, got)
		}
		if b, s := kftype.LaneParts(batch); b != batch || s != "" {
			t.Errorf("LaneParts(%q) = %q, %q, want the batch and no scope", batch, b, s)
		}
		for _, scope := range []string{"gpt-4o", "models/gemini-1.5-pro", "claude-3-5-sonnet@20240620", "a%b"} {
			lane := kftype.Lane(batch, scope)
			if lane == batch || lane == kftype.Lane(batch, scope+"x") {
				t.Errorf("Lane(%q, %q) = %q: not a lane of its own", batch, scope, lane)
			}
			if b, s := kftype.LaneParts(lane); b != batch || s != scope {
				t.Errorf("LaneParts(Lane(%q, %q)) = %q, %q", batch, scope, b, s)
			}
		}
	}
	b := kftype.BatchInfo{ID: "b", Scopes: []string{"gpt-4o", "o3"}}
	if got, want := b.Lanes(), []string{"b", kftype.Lane("b", "gpt-4o"), kftype.Lane("b", "o3")}; !slices.Equal(got, want) {
		t.Errorf("Lanes() = %q, want %q", got, want)
	}
}

// laneMessages fetches and acknowledges everything lane's consumer holds,
// returning the messages' subjects and items.
func laneMessages(t *testing.T, q *queue.Queue, lane string) (subjects []string, items []kftype.Item) {
	t.Helper()
	drainLane(t, q, lane, func(m jetstream.Msg, it kftype.Item) {
		if it.Scope != "" && m.Headers().Get(queue.HeaderScope) == "" {
			t.Errorf("item %q: scope %q without the %s header", it.ID, it.Scope, queue.HeaderScope)
		}
		subjects, items = append(subjects, m.Subject()), append(items, it)
	})
	return subjects, items
}

// A batch with items of two scopes and items without one has three lanes,
// each with its own consumer that sees only its lane's messages, on
// <prefix>.b.<batch>.<kind>[.<scope>]; the scope comes back from the
// message (a '%' in it is encoded in the header and decoded); the record
// lists the scopes. No two lanes' filters overlap, as a work-queue
// stream requires of its consumers.
func TestScopedLanes(t *testing.T) {
	q, _ := open(t)
	const batch = "two scopes"
	want := map[string]int{"": 3, "gpt-4o": 4, "models/gemini%1.5": 5}
	var in []kftype.Item
	for scope, n := range want {
		for i := range n {
			id := fmt.Sprintf("%s-%d", scope, i)
			in = append(in, kftype.Item{ID: id, Batch: batch, Kind: "sleep", Scope: scope, Payload: fmt.Appendf(nil, `{"id":%q}`, id)})
		}
	}
	rep, err := q.Publish(ctx(t), in...)
	if err != nil || rep.Published != 12 {
		t.Fatalf("publish: %+v %v", rep, err)
	}
	rec, err := q.Batch(ctx(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Scopes, []string{"gpt-4o", "models/gemini%1.5"}) || rec.Total != 12 {
		t.Fatalf("record: %+v, want scopes gpt-4o and models/gemini%%1.5 and 12 items", rec)
	}
	lanes, err := q.BatchLanes(ctx(t), batch)
	if err != nil || !slices.Equal(lanes, rec.Lanes()) {
		t.Fatalf("BatchLanes = %q, %v; want the record's %q", lanes, err, rec.Lanes())
	}
	names := map[string]bool{}
	for _, scope := range []string{"", "gpt-4o", "models/gemini%1.5"} {
		lane := kftype.Lane(batch, scope)
		if n, err := q.LaneMessages(ctx(t), lane); err != nil || n != uint64(want[scope]) {
			t.Errorf("LaneMessages(scope %q) = %d, %v; want %d", scope, n, err, want[scope])
		}
		name := q.LaneConsumerName(lane)
		if err := queue.CheckName(name); err != nil || names[name] {
			t.Errorf("consumer name %q of scope %q: %v (or not unique)", name, scope, err)
		}
		names[name] = true
		if scope != "" && !strings.HasPrefix(name, q.LaneConsumerName(batch)+"-s-") {
			t.Errorf("consumer name %q of scope %q: want the batch's, -s- and the scope's hash", name, scope)
		}
		subjects, items := laneMessages(t, q, lane)
		if len(items) != want[scope] {
			t.Errorf("lane of scope %q: %d messages, want %d", scope, len(items), want[scope])
		}
		subject := q.Config().SubjectPrefix + ".b." + queue.Token(batch) + ".sleep"
		if scope != "" {
			subject += "." + queue.Token(scope)
		}
		for i, it := range items {
			if it.Scope != scope || it.Batch != batch || it.Kind != "sleep" || !strings.HasPrefix(it.ID, scope+"-") {
				t.Errorf("lane of scope %q delivered %+v", scope, it)
			}
			if subjects[i] != subject {
				t.Errorf("item %q on %s, want %s", it.ID, subjects[i], subject)
			}
		}
		if n, err := q.LaneMessages(ctx(t), lane); err != nil || n != 0 {
			t.Errorf("LaneMessages(scope %q) after the fetch = %d, %v", scope, n, err)
		}
	}
	c, err := q.JetStream().Consumer(ctx(t), q.Config().Stream, q.LaneConsumerName(batch))
	if err != nil {
		t.Fatal(err)
	}
	if f := c.CachedInfo().Config.FilterSubject; !strings.HasSuffix(f, "."+queue.Token(batch)+".*") {
		t.Errorf("the batch's own consumer filters %s, want exactly its subjects without a scope", f)
	}
	for _, lane := range rec.Lanes() {
		if err := q.DeleteLaneConsumer(ctx(t), lane); err != nil {
			t.Fatal(err)
		}
		if _, err := q.JetStream().Consumer(ctx(t), q.Config().Stream, q.LaneConsumerName(lane)); err == nil {
			t.Errorf("the consumer of lane %q is still there", lane)
		}
	}
}

// Cancelling a batch drains every one of its lanes, including a scope's
// its record does not name yet (an enqueue adds its scopes to the record
// after publishing), through a producer's handle (Attach).
func TestDrainCancelledScopes(t *testing.T) {
	q0, nc := open(t)
	q, err := queue.Attach(ctx(t), nc, q0.Config())
	if err != nil {
		t.Fatal(err)
	}
	it := func(id, scope string) kftype.Item {
		return kftype.Item{ID: id, Batch: "c", Kind: "sleep", Scope: scope, Payload: []byte(`{}`)}
	}
	if _, err := q.Publish(ctx(t), it("a", ""), it("b", "gpt-4o"), it("c", "gpt-4o")); err != nil {
		t.Fatal(err)
	}
	// Published without a record update: the record does not know o3.
	p, err := q.NewPublisher(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Add(ctx(t), it("d", "o3")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetBatchState(ctx(t), "c", kftype.ActionCancel, "test"); err != nil {
		t.Fatal(err)
	}
	drained, unacked, err := q.DrainCancelled(ctx(t), "c", "test")
	if err != nil || drained != 4 || unacked != 0 {
		t.Fatalf("DrainCancelled = %d, %d, %v; want 4 drained, 0 out", drained, unacked, err)
	}
	st, err := q.Stats(ctx(t))
	if err != nil || st.Stream.Messages != 0 {
		t.Fatalf("stream after the drain: %+v %v", st.Stream, err)
	}
}

// A dead-lettered item of a scope is replayed into its scope's lane.
func TestReplayKeepsScope(t *testing.T) {
	q, _ := open(t)
	d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: "x", Batch: "b", Kind: "sleep", Scope: "gpt-4o",
		Reason: kftype.ReasonPermanent}, Payload: []byte(`{}`)}
	if err := q.PutDeadLetter(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	var listed kftype.DeadLetter
	if err := q.ListDeadLetters(ctx(t), "b", func(r kftype.DeadLetter) error { listed = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx(t), listed); err != nil {
		t.Fatal(err)
	}
	if rec, err := q.Batch(ctx(t), "b"); err != nil || !slices.Equal(rec.Scopes, []string{"gpt-4o"}) {
		t.Fatalf("record after the replay: %+v %v", rec, err)
	}
	if _, items := laneMessages(t, q, kftype.Lane("b", "gpt-4o")); len(items) != 1 || items[0].Scope != "gpt-4o" || items[0].Replay == "" {
		t.Fatalf("the scope's lane holds %+v", items)
	}
}

// A lane's consumer deleted while a cancel drains it (a worker's own
// drain of the batch found nothing out and deleted it) holds nothing:
// the drain ends without an error.
func TestDrainCancelledConsumerDeletedMeanwhile(t *testing.T) {
	q, _ := open(t)
	if _, err := q.Publish(ctx(t), kftype.Item{ID: "a", Batch: "c", Kind: "sleep", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetBatchState(ctx(t), "c", kftype.ActionCancel, "test"); err != nil {
		t.Fatal(err)
	}
	queue.SetLaneFetched(q, func(lane string) {
		if err := q.DeleteLaneConsumer(ctx(t), lane); err != nil {
			t.Error(err)
		}
	})
	drained, unacked, err := q.DrainCancelled(ctx(t), "c", "test")
	if err != nil || drained != 1 || unacked != 0 {
		t.Fatalf("DrainCancelled = %d, %d, %v; want 1 drained, 0 out", drained, unacked, err)
	}
}
