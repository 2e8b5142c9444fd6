package kftype_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A batch's priority is its items' place among the pool's waiters: the
// ranges are the same.
func TestPrioritiesArePools(t *testing.T) {
	if kftype.PriorityFirst != creds.PriorityFirst || kftype.PriorityLast != creds.PriorityLast ||
		kftype.PriorityDefault != creds.PriorityDefault {
		t.Fatalf("batch priorities %d..%d (default %d), pool's %d..%d (default %d)",
			kftype.PriorityFirst, kftype.PriorityLast, kftype.PriorityDefault,
			creds.PriorityFirst, creds.PriorityLast, creds.PriorityDefault)
	}
}

// Kinds are kept sorted, each once, and stored as the record's "kind":
// one string, comma separated, as records have always held it.
func TestKinds(t *testing.T) {
	var k kftype.Kinds
	for _, kind := range []string{"sleep", "exec", "", "sleep", "chat"} {
		k = k.Add(kind)
	}
	if want := (kftype.Kinds{"chat", "exec", "sleep"}); !slices.Equal(k, want) {
		t.Fatalf("Add: got %q, want %q", k, want)
	}
	b, err := json.Marshal(kftype.BatchInfo{ID: "b", Kinds: k})
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(b, &stored); err != nil || stored.Kind != "chat,exec,sleep" {
		t.Fatalf("stored kind %q (%v), want \"chat,exec,sleep\"", stored.Kind, err)
	}
	for in, want := range map[string]kftype.Kinds{
		`{"kind":"exec,sleep"}`: {"exec", "sleep"},
		`{"kind":"sleep,exec"}`: {"exec", "sleep"},
		`{"kind":"exec"}`:       {"exec"},
		`{"kind":""}`:           nil,
		`{}`:                    nil,
	} {
		var rec kftype.BatchInfo
		if err := json.Unmarshal([]byte(in), &rec); err != nil || !slices.Equal(rec.Kinds, want) {
			t.Errorf("%s: got %q (%v), want %q", in, rec.Kinds, err, want)
		}
	}
}

// Lane and LaneParts are each other's inverse; a batch has a lane of its
// items without a scope, then one per scope.
func TestLanes(t *testing.T) {
	for _, c := range []struct{ batch, scope string }{{"b", ""}, {"b", "gpt-4o"}, {"b/1 ü", "m"}} {
		if b, s := kftype.LaneParts(kftype.Lane(c.batch, c.scope)); b != c.batch || s != c.scope {
			t.Errorf("LaneParts(Lane(%q, %q)) = %q, %q", c.batch, c.scope, b, s)
		}
	}
	rec := kftype.BatchInfo{ID: "b", Scopes: []string{"m1", "m2"}}
	if got, want := rec.Lanes(), []string{"b", kftype.Lane("b", "m1"), kftype.Lane("b", "m2")}; !slices.Equal(got, want) {
		t.Errorf("Lanes: got %q, want %q", got, want)
	}
}
