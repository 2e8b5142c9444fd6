package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// oneJSONValue decodes out, which must be exactly one JSON value (and a
// final newline), into v.
func oneJSONValue(t *testing.T, what, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON value (%v):\n%s", what, err, out)
	}
}

// The one printer: an indented value, HTML characters as they are, C1 and
// bidi controls as \u escapes (the C0 ones are encoding/json's); a streamed
// array is what the printer prints for the whole slice.
func TestJSONPrinter(t *testing.T) {
	v := map[string]any{"text": "<b>&\u009b2J\u202eabc\x1b[31m", "n": 1}
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"n\": 1,\n  \"text\": \"<b>&\\u009b2J\\u202eabc\\u001b[31m\"\n}\n"
	if b.String() != want {
		t.Fatalf("want\n%s\ngot\n%s", want, b.String())
	}
	for _, n := range []int{0, 1, 3} {
		list := make([]any, n)
		for i := range list {
			list[i] = map[string]any{"i": i, "s": "x\u2066y", "l": []int{i}}
		}
		var whole, streamed bytes.Buffer
		if err := writeJSON(&whole, list); err != nil {
			t.Fatal(err)
		}
		a := newJSONArray(&streamed)
		for _, e := range list {
			if err := a.add(e); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.end(); err != nil {
			t.Fatal(err)
		}
		if whole.String() != streamed.String() {
			t.Errorf("%d elements: streamed\n%s\nwhole\n%s", n, streamed.String(), whole.String())
		}
	}
}

// Every command that reports something prints one JSON value with --json:
// enqueue (as the HTTP enqueue answers), its dry run, dlq list (an array,
// empty too), batch list, show, pause and resume, item show, creds list,
// set, enable and disable, config check.
func TestJSONEverywhere(t *testing.T) {
	srv := natstest.Start(t)
	rs := redistest.Start(t)
	dir := t.TempDir()
	pool := redistest.UniqueName(t)
	cfg := filepath.Join(dir, "kf.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`nats: {url: %q}
redis: {url: %q}
pool: {name: %s, credentials: [{id: key-a, secret_env: JSON_KEY_A}]}
queue: {stream: JSONOUT}
jobs:
  kinds:
    chat: {http: {url: "http://127.0.0.1:1/v1/chat"}}
log: {level: warn}
`, srv.URL(), rs.URL(), pool)), 0o600); err != nil {
		t.Fatal(err)
	}
	items := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(items, []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := ProducerMain(append(args, "--config", cfg), strings.NewReader(""), &out, &errb); code != want {
			t.Fatalf("producer %v: want exit %d, got %d\nstdout:\n%s\nstderr:\n%s", args, want, code, out.String(), errb.String())
		}
		return out.String()
	}

	var enq map[string]any
	oneJSONValue(t, "enqueue --dry-run --json", run(0, "enqueue", "--dry-run", "--json", "--batch", "j1", items), &enq)
	if enq["dry_run"] != true || enq["items"] != float64(3) || enq["kind"] != "chat" || enq["batch"] != "j1" {
		t.Fatalf("enqueue --dry-run --json: %v", enq)
	}
	enq = nil
	oneJSONValue(t, "enqueue --json", run(0, "enqueue", "--json", "--batch", "j1", items), &enq)
	for k, v := range map[string]any{"batch": "j1", "items": float64(3), "new": float64(3), "duplicates": float64(0), "kind": "chat",
		"priority": float64(3), "weight": float64(1)} {
		if enq[k] != v {
			t.Errorf("enqueue --json: %s = %v, want %v (%v)", k, enq[k], v, enq)
		}
	}
	if _, ok := enq["dry_run"]; ok {
		t.Errorf("enqueue --json: a real enqueue says dry_run: %v", enq)
	}
	enq = nil
	oneJSONValue(t, "enqueue --json again", run(0, "enqueue", "--json", "--batch", "j1", items), &enq)
	if enq["new"] != float64(0) || enq["duplicates"] != float64(3) {
		t.Errorf("enqueue --json again: %v", enq)
	}

	var dls []map[string]any
	if out := run(0, "dlq", "list", "--json"); out != "[]\n" {
		t.Errorf("dlq list --json without records: want [], got %q", out)
	}
	ctx, q := testQueue(t, srv.URL(), "JSONOUT", queue.Attach)
	for _, id := range []string{"a", "b"} {
		if err := q.PutDeadLetter(ctx, kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: id, Batch: "j1", Kind: "chat",
			Reason: kftype.ReasonPermanent, Attempts: 1, Error: "400 \u009b", FailedAt: time.Now().UTC()}, Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	out := run(0, "dlq", "list", "--json")
	oneJSONValue(t, "dlq list --json", out, &dls)
	if len(dls) != 2 || dls[0]["item"] != "a" || dls[1]["batch"] != "j1" || !strings.Contains(out, `400 \u009b`) {
		t.Errorf("dlq list --json: want an array of both records, the C1 control escaped:\n%s", out)
	}

	var list []map[string]any
	oneJSONValue(t, "batch list --json", run(0, "batch", "list", "--json"), &list)
	if len(list) != 1 || list[0]["id"] != "j1" {
		t.Errorf("batch list --json: %v", list)
	}
	var b map[string]any
	oneJSONValue(t, "batch pause --json", run(0, "batch", "pause", "j1", "--json"), &b)
	if b["id"] != "j1" || b["state"] != "paused" || b["action"] != "pause" || b["total"] != float64(3) || b["last_change"] == nil {
		t.Errorf("batch pause --json: %v", b)
	}
	b = nil
	oneJSONValue(t, "batch resume --json", run(0, "batch", "resume", "j1", "--json"), &b)
	if b["state"] != "running" || b["action"] != "resume" {
		t.Errorf("batch resume --json: %v", b)
	}

	var it map[string]any
	oneJSONValue(t, "item show --json", run(0, "item", "show", "j1", "c", "--json"), &it)
	if it["state"] != "waiting" || it["item"] != "c" || it["batch"] != "j1" || it["kind"] != "chat" || it["message"] == nil {
		t.Errorf("item show --json: %v", it)
	}
	it = nil
	oneJSONValue(t, "item show --json", run(0, "item", "show", "j1", "a", "--json"), &it)
	if it["state"] != "dead-lettered" || it["reason"] != kftype.ReasonPermanent || it["attempts"] != float64(1) {
		t.Errorf("item show --json of a dead letter: %v", it)
	}
	if text := run(0, "item", "show", "j1", "a"); !strings.Contains(text, "Item a of batch j1: dead-lettered") ||
		!strings.Contains(text, `400 \u{009b}`) || !strings.Contains(text, "Last outcome:") || !strings.Contains(text, "Attempts:") {
		t.Errorf("item show:\n%s", text)
	}
	if out := run(2, "item", "show", "j1", "zzz"); out != "" {
		t.Errorf("item show of an unknown item printed %q", out)
	}

	// The pool's commands.
	p, err := creds.New(rs.Client(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := p.Register(context.Background(), []creds.Credential{{ID: "key-a", MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	var pl map[string]any
	oneJSONValue(t, "creds list --json", run(0, "creds", "list", "--json"), &pl)
	if pl["total"] != float64(1) || pl["credentials"] == nil {
		t.Errorf("creds list --json: %v", pl)
	}
	for _, c := range []struct {
		args          []string
		action, state string
	}{
		{[]string{"creds", "set", "key-a", "--max-concurrent", "3", "--json"}, "set", "available"},
		{[]string{"creds", "disable", "key-a", "--reason", "billing", "--json"}, "disable", "disabled"},
		{[]string{"creds", "enable", "key-a", "--json"}, "enable", "available"},
	} {
		var cr map[string]any
		oneJSONValue(t, strings.Join(c.args, " "), run(0, c.args...), &cr)
		if cr["id"] != "key-a" || cr["action"] != c.action || cr["state"] != c.state || cr["pool"] != pool {
			t.Errorf("%v: %v", c.args, cr)
		}
		if c.action == "set" && cr["max_concurrent"] != float64(3) {
			t.Errorf("%v: %v", c.args, cr)
		}
	}

	var cc map[string]any
	t.Setenv("JSON_KEY_A", "sk-json")
	oneJSONValue(t, "config check --json", run(0, "config", "check", "--json"), &cc)
	if cc["ok"] != true || cc["config"] != cfg || len(cc["problems"].([]any)) != 0 {
		t.Errorf("config check --json: %v", cc)
	}
}
