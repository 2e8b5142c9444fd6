package enqueue_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Each item's scope is read from pool.scope.field; the batch's record
// lists the scopes, and each scope's items are in their own lane (an item
// without the field, or with null, has none).
func TestRunScopes(t *testing.T) {
	q, _ := open(t)
	path := writeFile(t, "scoped.jsonl", `{"id":"a","model":"gpt-4o"}
{"id":"b","model":"o3"}
{"id":"c","model":"gpt-4o","nested":{"model":5}}
{"id":"d"}
{"id":"e","model":null}
{"id":"f","model":"models/gemini-1.5-pro"}
`)
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Batch: "s", ScopeField: "model"})
	if err != nil || rep.New != 6 {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	scopes := []string{"gpt-4o", "models/gemini-1.5-pro", "o3"}
	if !slices.Equal(rep.Scopes, scopes) {
		t.Errorf("report's scopes %q, want %q", rep.Scopes, scopes)
	}
	rec, err := q.Batch(ctx(t), "s")
	if err != nil || !slices.Equal(rec.Scopes, scopes) || rec.Total != 6 {
		t.Fatalf("record %+v %v: want 6 items of scopes %q", rec, err, scopes)
	}
	for lane, want := range map[string]uint64{"s": 2, kftype.Lane("s", "gpt-4o"): 2, kftype.Lane("s", "o3"): 1, kftype.Lane("s", "models/gemini-1.5-pro"): 1} {
		if n, err := q.LaneMessages(ctx(t), lane); err != nil || n != want {
			t.Errorf("lane %q holds %d, %v; want %d", lane, n, err, want)
		}
	}
	// Without a scope field, the same items have none.
	rep, err = enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Batch: "plain"})
	if err != nil || rep.New != 6 || len(rep.Scopes) != 0 {
		t.Fatalf("enqueue without a scope field: %+v %v", rep, err)
	}
	if n, err := q.LaneMessages(ctx(t), "plain"); err != nil || n != 6 {
		t.Errorf("lane plain holds %d, %v; want 6", n, err)
	}
}

// A scope that is not a string, or not a valid scope, is a bad line naming
// the line and the field: nothing is enqueued.
func TestRunBadScope(t *testing.T) {
	q, _ := open(t)
	path := writeFile(t, "bad.jsonl", `{"id":"a","model":"gpt-4o"}
{"id":"b","model":5}
{"id":"c","model":""}
{"id":"d","model":"gpt 4o"}
{"id":"e","model":{"name":"x"}}
{"id":"f","model":"`+strings.Repeat("m", 129)+`"}
`)
	_, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Batch: "bad", ScopeField: "model"})
	var ie *enqueue.InputError
	if !errors.As(err, &ie) || !errors.Is(err, enqueue.ErrInput) || ie.Count != 5 {
		t.Fatalf("want an InputError with 5 bad lines, got %v", err)
	}
	for i, want := range []string{
		`line 2: item "b": bad scope: field "model" is a number, want a string`,
		`line 3: item "c": bad scope: field "model" is empty`,
		`line 4: item "d": bad scope: field "model" "gpt 4o" holds " "`,
		`line 5: item "e": bad scope: field "model" is an object, want a string`,
		`line 6: item "f": bad scope: field "model" is 129 bytes long, at most 128`,
	} {
		if got := ie.Problems[i].Error(); !strings.HasPrefix(got, want) || !errors.Is(ie.Problems[i], jsonl.ErrBadScope) {
			t.Errorf("problem %d: %q, want an ErrBadScope starting %q", i, got, want)
		}
	}
	if n := messages(t, q); n != 0 {
		t.Fatalf("%d messages published", n)
	}
}

// A scope is what items share limits by, not a value of each item's: an
// input with more than MaxScopes distinct scopes is refused.
func TestRunTooManyScopes(t *testing.T) {
	path := writeFile(t, "many.jsonl", lines(enqueue.MaxScopes+1, `{"id":"i-%[1]d","model":"m-%[1]d"}`))
	_, err := enqueue.Run(ctx(t), nil, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", DryRun: true, ScopeField: "model"})
	if !errors.Is(err, enqueue.ErrInput) || !strings.Contains(err.Error(), fmt.Sprintf("line %d:", enqueue.MaxScopes+1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("more than %d distinct values", enqueue.MaxScopes)) {
		t.Fatalf("want an ErrInput naming line %d, got %v", enqueue.MaxScopes+1, err)
	}
	path = writeFile(t, "enough.jsonl", lines(enqueue.MaxScopes, `{"id":"i-%[1]d","model":"m-%[1]d"}`))
	if _, err := enqueue.Run(ctx(t), nil, enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", DryRun: true, ScopeField: "model"}); err != nil {
		t.Fatalf("%d scopes: %v", enqueue.MaxScopes, err)
	}
}

// A kind is a built-in one or one the configuration names (jobs.kinds);
// any other is an invalid request naming the kinds there are.
func TestCheckKind(t *testing.T) {
	src := enqueue.Source{Name: "x", Reader: strings.NewReader("")}
	if err := enqueue.Check(enqueue.Request{Source: src, Kind: "summarize", NamedKinds: []string{"summarize", "embed"}}); err != nil {
		t.Fatalf("a named kind: %v", err)
	}
	if err := enqueue.Check(enqueue.Request{Source: src, Kind: "http", NamedKinds: []string{"embed"}}); err != nil {
		t.Fatalf("a built-in kind: %v", err)
	}
	err := enqueue.Check(enqueue.Request{Source: src, Kind: "nope", NamedKinds: []string{"summarize", "embed"}})
	var re *enqueue.RequestError
	if !errors.Is(err, enqueue.ErrInvalid) || !errors.As(err, &re) || re.Field != "kind" ||
		!strings.Contains(err.Error(), `unknown job kind "nope"`) || !strings.Contains(err.Error(), "jobs.kinds: embed, summarize") {
		t.Fatalf("an unknown kind: %v", err)
	}
	if err := enqueue.Check(enqueue.Request{Source: src, Kind: "summarize"}); !errors.Is(err, enqueue.ErrInvalid) {
		t.Fatalf("a kind the configuration does not name: %v", err)
	}
}
