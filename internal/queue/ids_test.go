package queue_test

import (
	"encoding/json"
	"net/textproto"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// trickyIDs are IDs a header cannot carry as they are, or that hold the
// escape character, next to their plain look-alikes.
var trickyIDs = []string{
	"ws-1", " ws-1", "ws-1 ", "  ws-1  ", " ", "   ",
	"a\tb", "\tws-1", "ws-1\t", "x\r\ny", "x\ny", "x\ry", "x y", "a\x00b", "bell\x07", "del\x7f",
	"50%", "%20", "ws-1%20", "%", "%%", "%zz", "a/b", "/", "ü ", " 日本", "日本", "naïve café",
}

func TestHeaderValueRoundTrip(t *testing.T) {
	seen := map[string]string{}
	for _, id := range trickyIDs {
		v, encoded := queue.HeaderValue(id)
		if v != strings.TrimSpace(v) {
			t.Errorf("HeaderValue(%q) = %q: white space at an end", id, v)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("HeaderValue(%q) = %q: a control character", id, v)
		}
		if plain := !strings.ContainsAny(id, "%\x7f") && !strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 }) &&
			id == strings.Trim(id, " "); encoded == plain {
			t.Errorf("HeaderValue(%q) = %q, encoded %v, want encoded %v", id, v, encoded, !plain)
		}
		if !encoded && v != id {
			t.Errorf("HeaderValue(%q) = %q but says it is not encoded", id, v)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("%q and %q both encode to %q", other, id, v)
		}
		seen[v] = id
		if !encoded {
			continue
		}
		back, err := queue.IDFromHeader(v)
		if err != nil || back != id {
			t.Errorf("round trip %q -> %q -> %q (%v)", id, v, back, err)
		}
	}
	for _, bad := range []string{"%", "%2", "a%zz", "%G0"} {
		if got, err := queue.IDFromHeader(bad); err == nil {
			t.Errorf("IDFromHeader(%q) = %q, want an error", bad, got)
		}
	}
}

func FuzzHeaderValue(f *testing.F) {
	for _, s := range trickyIDs {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		v, encoded := queue.HeaderValue(id)
		// nats.go trims header values with textproto.TrimString (ASCII
		// white space only: U+0085 and the like stay).
		if v != textproto.TrimString(v) || strings.ContainsAny(v, "\r\n") {
			t.Fatalf("HeaderValue(%q) = %q: a header would change it", id, v)
		}
		if !encoded {
			if v != id {
				t.Fatalf("HeaderValue(%q) = %q unencoded", id, v)
			}
			return
		}
		if back, err := queue.IDFromHeader(v); err != nil || back != id {
			t.Fatalf("round trip %q -> %q -> %q (%v)", id, v, back, err)
		}
	})
}

// A plain ID is its own header value and costs no allocation either way.
func TestHeaderValueKeepsPlainIDs(t *testing.T) {
	for _, id := range []string{"item-0001", "a b", "ü/日本", "https://x.example/a?b=c"} {
		if v, enc := queue.HeaderValue(id); v != id || enc {
			t.Errorf("HeaderValue(%q) = %q, %v", id, v, enc)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = queue.HeaderValue(id) }); n != 0 {
			t.Errorf("HeaderValue(%q): %v allocations", id, n)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = queue.IDFromHeader(id) }); n != 0 {
			t.Errorf("IDFromHeader(%q): %v allocations", id, n)
		}
	}
	if got := queue.MsgID("b2", "ws-1"); got != "b2/ws-1" {
		t.Errorf("MsgID of plain IDs = %q, want it unchanged: b2/ws-1", got)
	}
}

// No two (batch, item) pairs share a message ID, including pairs a '/'
// could split two ways.
func TestMsgIDsAreDistinct(t *testing.T) {
	batches := slices.Compact(slices.Sorted(slices.Values(append([]string{"b2", "b2 ", " b2", "b", "b/ws-1", "a"}, trickyIDs...))))
	items := slices.Compact(slices.Sorted(slices.Values(append([]string{"b/c", "c", "ws-1/x"}, trickyIDs...))))
	seen := map[string][2]string{}
	for _, b := range batches {
		for _, it := range items {
			id := queue.MsgID(b, it)
			if id != strings.TrimSpace(id) || strings.ContainsAny(id, "\r\n") {
				t.Errorf("MsgID(%q, %q) = %q: a header would change it", b, it, id)
			}
			if other, dup := seen[id]; dup {
				t.Errorf("MsgID(%q, %q) = MsgID(%q, %q) = %q", b, it, other[0], other[1], id)
			}
			seen[id] = [2]string{b, it}
		}
	}
}

// fetchItems fetches n work messages from the lanes of batches and
// decodes them.
func fetchItems(t *testing.T, q *queue.Queue, n int, batches ...string) []kftype.Item {
	t.Helper()
	var out []kftype.Item
	for _, b := range batches {
		out = append(out, fetchLane(t, q, b)...)
	}
	if len(out) != n {
		t.Fatalf("fetched %d of %d items", len(out), n)
	}
	return out
}

// fetchLane fetches and acks everything lane holds.
func fetchLane(t *testing.T, q *queue.Queue, lane string) []kftype.Item {
	t.Helper()
	var out []kftype.Item
	drainLane(t, q, lane, func(_ jetstream.Msg, it kftype.Item) { out = append(out, it) })
	return out
}

// drainLane fetches, decodes and acks everything lane's consumer holds,
// handing each message to seen before its ack.
func drainLane(t *testing.T, q *queue.Queue, lane string, seen func(jetstream.Msg, kftype.Item)) {
	t.Helper()
	cons, err := q.LaneConsumer(ctx(t), lane)
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			it, err := queue.DecodeItem(m)
			if err != nil {
				t.Fatalf("decode %v: %v", m.Headers(), err)
			}
			seen(m, it)
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if got == 0 {
			return
		}
	}
}

// Items whose IDs differ only in white space, control characters or
// escapes are all stored (none is taken for a duplicate of another) and
// each is delivered with its exact item and batch ID.
func TestTrickyIDsCrossNATSExactly(t *testing.T) {
	q, _ := open(t)
	var in []kftype.Item
	for _, batch := range []string{"b2", "b2 ", "%62%32"} {
		for _, id := range trickyIDs {
			it := kftype.Item{ID: id, Batch: batch, Kind: "sleep", Payload: []byte(`{"ms":0}`)}
			if _, _, ok := q.Fits(it); !ok {
				t.Fatalf("%q does not fit", id)
			}
			in = append(in, it)
		}
	}
	rep, err := q.Publish(ctx(t), in...)
	if err != nil || rep.Published != len(in) || rep.Duplicates != 0 {
		t.Fatalf("publish %d items: %+v %v", len(in), rep, err)
	}
	got := fetchItems(t, q, len(in), "b2", "b2 ", "%62%32")
	key := func(it kftype.Item) string { return it.Batch + "\x00" + it.ID }
	var want, have []string
	for i := range in {
		want, have = append(want, key(in[i])), append(have, key(got[i]))
	}
	sort.Strings(want)
	sort.Strings(have)
	if strings.Join(want, "\n") != strings.Join(have, "\n") {
		t.Fatalf("delivered items differ:\nwant %q\ngot  %q", want, have)
	}
}

// A message without the ID encoding header has its IDs as they are, an
// escape character included.
func TestUnencodedIDsDecodeAsTheyAre(t *testing.T) {
	q, nc := open(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	old := []struct{ id, batch string }{{"ws-1", "b"}, {"50%20off", "b%"}, {"%", "b%2F1"}}
	lane := func(batch string) string { return q.Config().SubjectPrefix + ".b." + queue.Token(batch) + ".sleep" }
	for _, o := range old {
		m := nats.NewMsg(lane(o.batch))
		m.Data = []byte(`{}`)
		m.Header.Set(queue.HeaderItem, o.id)
		m.Header.Set(queue.HeaderBatch, o.batch)
		m.Header.Set(queue.HeaderKind, "sleep")
		m.Header.Set(jetstream.MsgIDHeader, o.batch+"/"+o.id)
		if _, err := js.PublishMsg(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	got := fetchItems(t, q, len(old), "b", "b%", "b%2F1")
	for i, o := range old {
		if got[i].ID != o.id || got[i].Batch != o.batch {
			t.Errorf("message %d decoded as item %q batch %q, want %q %q", i, got[i].ID, got[i].Batch, o.id, o.batch)
		}
	}

	// An encoding this version does not know, or a bad escape, is an
	// undecodable message, never a wrong ID.
	for _, h := range []map[string]string{
		{queue.HeaderItem: "x", queue.HeaderBatch: "b", queue.HeaderIDEncoding: "base99"},
		{queue.HeaderItem: "x%2", queue.HeaderBatch: "b", queue.HeaderIDEncoding: queue.IDEncodingPercent},
	} {
		m := nats.NewMsg(lane("b"))
		m.Data = []byte(`{}`)
		for k, v := range h {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx(t), m); err != nil {
			t.Fatal(err)
		}
		cons, err := q.LaneConsumer(ctx(t), "b")
		if err != nil {
			t.Fatal(err)
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if it, err := queue.DecodeItem(msg); err == nil {
			t.Errorf("headers %v decoded as %+v, want an error", h, it)
		}
		_ = msg.Ack()
	}
}

// Results, dead letters, replays and batch records of "b2 " and "b2",
// "ws-1 " and "ws-1" are kept apart and found by their exact IDs.
func TestTrickyIDsInResultsDeadLettersAndBatches(t *testing.T) {
	q, _ := open(t)
	for _, batch := range []string{"b2", "b2 "} {
		for _, id := range []string{"ws-1", "ws-1 ", " ws-1"} {
			if err := q.PutResult(ctx(t), kftype.Result{Item: id, Batch: batch, Outcome: kftype.OutcomeSucceeded}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.AddToBatch(ctx(t), batch, "sleep", 3); err != nil {
			t.Fatal(err)
		}
	}
	var results []string
	if err := q.ReadResults(ctx(t), "b2 ", func(r kftype.Result) error {
		results = append(results, r.Batch+"|"+r.Item)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(results)
	if want := []string{"b2 | ws-1", "b2 |ws-1", "b2 |ws-1 "}; strings.Join(results, ",") != strings.Join(want, ",") {
		t.Errorf("results of %q: %q, want %q", "b2 ", results, want)
	}
	bs, err := q.Batches(ctx(t))
	if err != nil || len(bs) != 2 {
		t.Fatalf("batch records: %+v %v", bs, err)
	}
	for _, b := range bs {
		if (b.ID != "b2" && b.ID != "b2 ") || b.Total != 3 {
			t.Errorf("batch record %+v", b)
		}
	}

	for _, id := range []string{"ws-1", "ws-1 "} {
		d := kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: id, Batch: "b2 ", Kind: "sleep",
			Reason: kftype.ReasonPermanent, Error: "boom"}, Payload: json.RawMessage(`{"id":"x"}`)}
		if err := q.PutDeadLetter(ctx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	todo, missing, err := q.DeadLettersToReplay(ctx(t), "b2 ", []string{"ws-1 "})
	if err != nil || len(missing) != 0 || len(todo) != 1 || todo[0].Item != "ws-1 " || todo[0].Batch != "b2 " {
		t.Fatalf("dead letters to replay: %+v missing %q %v", todo, missing, err)
	}
	if _, missing, _ := q.DeadLettersToReplay(ctx(t), "b2", []string{"ws-1 "}); len(missing) != 1 {
		t.Errorf("batch %q has no dead letter, found one", "b2")
	}
	if err := q.Replay(ctx(t), todo[0]); err != nil {
		t.Fatal(err)
	}
	got := fetchItems(t, q, 1, "b2 ")
	if got[0].ID != "ws-1 " || got[0].Batch != "b2 " || got[0].Replay == "" {
		t.Fatalf("replayed item: %+v", got[0])
	}
	var left []string
	if err := q.ListDeadLetters(ctx(t), "", func(d kftype.DeadLetter) error { left = append(left, d.Item); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "ws-1" {
		t.Errorf("dead letters left: %q, want only %q", left, "ws-1")
	}
}
