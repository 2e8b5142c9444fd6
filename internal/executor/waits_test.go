package executor

import (
	"reflect"
	"testing"
)

// A class may have half the slots in acquires that may wait; the class
// is full (its lanes passed over) when that many are queued in the pool,
// or are in acquires while its last acquire was queued: acquires served at
// once never stop the pulling.
func TestClassWaits(t *testing.T) {
	c := NewClassWaits(4)
	for i := range 2 {
		if !c.enter("*|gpt-4o") {
			t.Fatalf("slot %d of gpt-4o refused", i)
		}
	}
	if c.enter("*|gpt-4o") {
		t.Fatal("a third gpt-4o slot of 4 let in to wait")
	}
	if got := c.Full(); len(got) != 0 {
		t.Fatalf("two acquires in flight, none queued: full %v, want none", got)
	}
	c.queued("*|gpt-4o")
	if got := c.Full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("one of two queued (its keys are busy), the other in an acquire: full %v", got)
	}
	c.queued("*|gpt-4o")
	if !c.enter("*|o3") {
		t.Fatal("o3 refused while only gpt-4o is full")
	}
	if got := c.Full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("full: %v", got)
	}
	if !c.leave("*|gpt-4o", true) {
		t.Fatal("leaving a full class: want wasFull")
	}
	if c.leave("*|o3", false) {
		t.Fatal("leaving an acquire served at once: want not wasFull")
	}
	if got := c.Full(); len(got) != 0 {
		t.Fatalf("full after a slot was served: %v", got)
	}
	if !c.enter("*|gpt-4o") {
		t.Fatal("a gpt-4o slot refused after one left")
	}
	// Its last acquire was queued (its keys are busy): slots in acquires
	// make it full at once, before the pool queues them.
	if got := c.Full(); !reflect.DeepEqual(got, []string{"*|gpt-4o"}) {
		t.Fatalf("busy class with its share in acquires: full %v", got)
	}
	if !c.leave("*|gpt-4o", false) {
		t.Fatal("leaving a full class: want wasFull")
	}
	if !c.enter("*|gpt-4o") {
		t.Fatal("a gpt-4o slot refused")
	}
	if got := c.Full(); len(got) != 0 {
		t.Fatalf("an acquire served at once since: full %v, want none", got)
	}
	if one := NewClassWaits(1); !one.enter("x") || one.enter("x") {
		t.Fatal("concurrency 1: one slot may wait, no more")
	}
}
