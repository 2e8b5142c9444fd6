package worker

import (
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Two batches of one kind and scope are one class (they share the waiting
// slots in the schedule's order, so weights hold between them); another
// scope, or a kind of other keys, is another class.
func TestLaneClasses(t *testing.T) {
	llm, err := creds.NewKeySet("key-a", "key-b")
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{
		handlers: map[string]jobs.Handler{"chat": nil, "sleep": nil, "embed": nil},
		kindKeys: map[string]*creds.KeySet{"chat": llm},
	}
	chat := executor.WaitClass(llm, "gpt-4o")
	for _, c := range []struct {
		name string
		b    kftype.BatchInfo
		lane string
		want []string
	}{
		{"a kind of every key, no scope", kftype.BatchInfo{ID: "a", Kinds: kftype.Kinds{"sleep"}}, "a", []string{"*|"}},
		{"another batch of it: the same class", kftype.BatchInfo{ID: "b", Kinds: kftype.Kinds{"sleep"}}, "b", []string{"*|"}},
		{"a kind of a key group, a scope", kftype.BatchInfo{ID: "c", Kinds: kftype.Kinds{"chat"}}, kftype.Lane("c", "gpt-4o"), []string{chat}},
		{"two kinds", kftype.BatchInfo{ID: "d", Kinds: kftype.Kinds{"chat", "embed"}}, kftype.Lane("d", "gpt-4o"), []string{chat, "*|gpt-4o"}},
		{"a kind this worker does not serve", kftype.BatchInfo{ID: "e", Kinds: kftype.Kinds{"resize"}}, "e", []string{"?resize|"}},
		{"no kind recorded", kftype.BatchInfo{ID: "f"}, "f", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := w.laneClasses(c.b, c.lane); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("classes: got %q, want %q", got, c.want)
			}
		})
	}
	if executor.WaitClass(llm, "gpt-4o") == executor.WaitClass(nil, "gpt-4o") || executor.WaitClass(nil, "a") == executor.WaitClass(nil, "b") {
		t.Fatal("classes of other keys or scopes must differ")
	}
}
