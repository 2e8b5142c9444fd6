package batchview

import (
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Each item counts once, by its latest result.
func TestFallbacks(t *testing.T) {
	var f Fallbacks
	if got := f.Counts(); got == nil || len(got) != 0 {
		t.Fatalf("none: got %#v, want []", got)
	}
	moved := func(why string) kftype.Result {
		return kftype.Result{Kind: "azure", FallbackFrom: "chat", FallbackReason: why}
	}
	f.Add(1, moved(kftype.FallbackWaited))
	f.Add(2, moved(kftype.FallbackWaited))
	f.Add(3, moved(kftype.FallbackFailing))
	f.Add(2, moved(kftype.FallbackWaited))  // read again
	f.Add(3, kftype.Result{Kind: "chat"})   // ran again on its own kind
	f.Add(4, kftype.Result{Kind: "chat"})   // never moved
	f.Add(1, moved(kftype.FallbackFailing)) // a later run moved for another reason
	want := []kftype.FallbackCount{
		{Kind: "chat", To: "azure", Why: kftype.FallbackFailing, Items: 1},
		{Kind: "chat", To: "azure", Why: kftype.FallbackWaited, Items: 1},
	}
	if got := f.Counts(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}
