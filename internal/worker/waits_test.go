package worker

import (
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// A class may have half the slots in acquires that may wait; the class
// is full (its lanes passed over) when that many are queued in the pool,
// or are in acquires while its last acquire was queued: acquires served at
// once never stop the pulling.
func TestClassWaits(t *testing.T) {
	c := newClassWaits(4)
	for i := range 2 {
		if !c.enter("*|gpt-4o") {
			t.Fatalf("slot %d of gpt-4o refused", i)
		}
	}
	if c.enter("*|gpt-4o") {
		t.Fatal("a third gpt-4o slot of 4 let in to wait")
	}
	if got := c.full(); len(got) != 0 {
		t.Fatalf("two acquires in flight, none queued: full %v, want none", got)
	}
	c.queued("*|gpt-4o")
	if got := c.full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("one of two queued (its keys are busy), the other in an acquire: full %v", got)
	}
	c.queued("*|gpt-4o")
	if !c.enter("*|o3") {
		t.Fatal("o3 refused while only gpt-4o is full")
	}
	if got := c.full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("full: %v", got)
	}
	if !c.leave("*|gpt-4o", true) {
		t.Fatal("leaving a full class: want wasFull")
	}
	if c.leave("*|o3", false) {
		t.Fatal("leaving an acquire served at once: want not wasFull")
	}
	if got := c.full(); len(got) != 0 {
		t.Fatalf("full after a slot was served: %v", got)
	}
	if !c.enter("*|gpt-4o") {
		t.Fatal("a gpt-4o slot refused after one left")
	}
	// Its last acquire was queued (its keys are busy): slots in acquires
	// make it full at once, before the pool queues them.
	if got := c.full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("busy class with its share in acquires: full %v", got)
	}
	if !c.leave("*|gpt-4o", false) {
		t.Fatal("leaving a full class: want wasFull")
	}
	if !c.enter("*|gpt-4o") {
		t.Fatal("a gpt-4o slot refused")
	}
	if got := c.full(); len(got) != 0 {
		t.Fatalf("an acquire served at once since: full %v, want none", got)
	}
	if one := newClassWaits(1); !one.enter("x") || one.enter("x") {
		t.Fatal("concurrency 1: one slot may wait, no more")
	}
}

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
	chat := waitClass(llm, "gpt-4o")
	for _, c := range []struct {
		name string
		b    queue.BatchInfo
		lane string
		want []string
	}{
		{"a kind of every key, no scope", queue.BatchInfo{ID: "a", Kind: "sleep"}, "a", []string{"*|"}},
		{"another batch of it: the same class", queue.BatchInfo{ID: "b", Kind: "sleep"}, "b", []string{"*|"}},
		{"a kind of a key group, a scope", queue.BatchInfo{ID: "c", Kind: "chat"}, queue.Lane("c", "gpt-4o"), []string{chat}},
		{"two kinds", queue.BatchInfo{ID: "d", Kind: "chat,embed"}, queue.Lane("d", "gpt-4o"), []string{chat, "*|gpt-4o"}},
		{"a kind this worker does not serve", queue.BatchInfo{ID: "e", Kind: "resize"}, "e", []string{"?resize|"}},
		{"no kind recorded", queue.BatchInfo{ID: "f"}, "f", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := w.laneClasses(c.b, c.lane); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("classes: got %q, want %q", got, c.want)
			}
		})
	}
	if waitClass(llm, "gpt-4o") == waitClass(nil, "gpt-4o") || waitClass(nil, "a") == waitClass(nil, "b") {
		t.Fatal("classes of other keys or scopes must differ")
	}
}
