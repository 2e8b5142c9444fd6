package enqueue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// fetchAll reads every message of a batch's lanes (scopes given), without
// acknowledging them, as items.
func fetchAll(t *testing.T, q *queue.Queue, batch string, scopes ...string) map[string]kftype.Item {
	t.Helper()
	out := map[string]kftype.Item{}
	for _, sc := range scopes {
		cons, err := q.LaneConsumer(ctx(t), kftype.Lane(batch, sc))
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range msgs.Messages() {
			it, err := queue.DecodeItem(m)
			if err != nil {
				t.Fatal(err)
			}
			out[it.ID] = it
		}
	}
	return out
}

// An OpenAI batch file on an openai kind: each line's custom_id is its
// item's ID, its body the item's payload byte for byte, its url the
// endpoint (kept when it is not the default), its model the scope and the
// provider's estimate its cost.
func TestEnqueueOpenAIBatchFile(t *testing.T) {
	q, _ := open(t)
	const chat = `{"model": "gpt-4o-mini",  "messages":[{"role":"user","content":"Hello there, how are you?"}],"max_completion_tokens":10}`
	const embed = `{"model":"text-embedding-3-small","input":"abcdefgh"}`
	input := `{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":` + chat + `}
{"custom_id":"req-2","method":"POST","url":"/v1/embeddings","body":` + embed + `}
`
	path := writeFile(t, "batchinput.jsonl", input)
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "chat", NamedKinds: []string{"chat"},
		Batch: "oa", Format: "openai-batch", Provider: "openai"})
	if err != nil || rep.New != 2 {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	got := fetchAll(t, q, "oa", "gpt-4o-mini", "text-embedding-3-small")
	a, b := got["req-1"], got["req-2"]
	if string(a.Payload) != chat || a.Endpoint != "" || a.Scope != "gpt-4o-mini" || a.Cost != 7+10 {
		t.Errorf("req-1: payload %s endpoint %q scope %q cost %d", a.Payload, a.Endpoint, a.Scope, a.Cost)
	}
	if string(b.Payload) != embed || b.Endpoint != "/v1/embeddings" || b.Scope != "text-embedding-3-small" || b.Cost != 2 {
		t.Errorf("req-2: payload %s endpoint %q scope %q cost %d", b.Payload, b.Endpoint, b.Scope, b.Cost)
	}
}

// JSON Lines on a provider kind: the request is the line without its ID
// field, every other byte as it is.
func TestEnqueueJSONLOnAProviderKind(t *testing.T) {
	q, _ := open(t)
	path := writeFile(t, "chat.jsonl", `{"id":"a","model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`+"\n")
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "claude", NamedKinds: []string{"claude"},
		Batch: "an", Provider: "anthropic"})
	if err != nil || rep.New != 1 {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	it := fetchAll(t, q, "an", "claude-sonnet-4-6")["a"]
	if string(it.Payload) != `{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}` || it.Scope != "claude-sonnet-4-6" {
		t.Fatalf("item: %s scope %q", it.Payload, it.Scope)
	}
}

// Lines a provider would refuse are bad lines, naming the line and the
// field, found by a dry run as by a real one; nothing is published.
func TestEnqueueProviderBadLines(t *testing.T) {
	q, _ := open(t)
	for _, tc := range []struct {
		name, format, provider, input, want string
	}{
		{"no custom_id", "openai-batch", "openai", `{"method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`, `line 1: no ID: no field "custom_id"`},
		{"a repeated custom_id", "openai-batch", "openai",
			`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}` + "\n" +
				`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`, `line 2: item "x": duplicate ID (first on line 1)`},
		{"no model", "openai-batch", "openai", `{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`, `line 1: item "x": not a request the provider takes: body.model: missing`},
		{"a GET", "openai-batch", "openai", `{"custom_id":"x","method":"GET","url":"/v1/models","body":{"model":"m"}}`, `method: is "GET", want "POST"`},
		{"an unknown endpoint", "openai-batch", "openai", `{"custom_id":"x","method":"POST","url":"/v1/images","body":{"model":"m","prompt":"p"}}`, `url: is "/v1/images"`},
		{"a number as custom_id", "openai-batch", "openai", `{"custom_id":7,"method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`, `custom_id: is 7, want a string`},
		{"anthropic without max_tokens", "anthropic-batch", "anthropic", `{"custom_id":"x","params":{"model":"claude-sonnet-4-6","messages":[]}}`, `params.max_tokens: missing`},
		{"anthropic without messages", "jsonl", "anthropic", `{"id":"x","model":"claude-sonnet-4-6","max_tokens":3}`, `item "x": not a request the provider takes: messages: missing`},
		{"a bad max_tokens", "anthropic-batch", "anthropic", `{"custom_id":"x","params":{"model":"c","max_tokens":-2,"messages":[]}}`, `params.max_tokens: is -2, want a whole number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "bad.jsonl", tc.input+"\n")
			for _, dry := range []bool{true, false} {
				_, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "k", NamedKinds: []string{"k"},
					Batch: "bad", Format: tc.format, Provider: tc.provider, DryRun: dry})
				var ie *enqueue.InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("dry run %v: %v, want a bad line containing %q", dry, err, tc.want)
				}
			}
		})
	}
	if n := messages(t, q); n != 0 {
		t.Fatalf("%d messages published from bad input", n)
	}
	// A provider format on a kind of another provider, or of none.
	for _, tc := range []struct{ format, provider, want string }{
		{"openai-batch", "", "format openai-batch takes a kind of provider openai or openai-compatible; this kind names no provider"},
		{"anthropic-batch", "openai", "format anthropic-batch takes a kind of provider anthropic; this kind's provider is openai"},
		{"csv", "", `unknown format "csv"`},
	} {
		err := enqueue.Check(enqueue.Request{Source: enqueue.Source{Path: "x"}, Kind: "k", NamedKinds: []string{"k"}, Format: tc.format, Provider: tc.provider})
		if !errors.Is(err, enqueue.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on %q: %v, want %q", tc.format, tc.provider, err, tc.want)
		}
	}
}
