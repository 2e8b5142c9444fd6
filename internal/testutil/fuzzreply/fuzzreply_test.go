package fuzzreply_test

import (
	"math"
	"reflect"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/fuzzreply"
)

func TestRoundTrip(t *testing.T) {
	for _, v := range []any{
		nil, int64(-7), "", "abc", 1.5, math.Inf(-1), true, false,
		[]any{}, []any{"1", int64(2), []any{nil, []any{"x"}}},
	} {
		b, err := fuzzreply.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := fuzzreply.Decode(b); !reflect.DeepEqual(got, v) {
			t.Errorf("Decode(Encode(%#v)) = %#v", v, got)
		}
	}
	if _, err := fuzzreply.Encode(map[string]int{}); err == nil {
		t.Error("Encode took a map")
	}
}

// Every input decodes, and re-encoding a decoded value decodes to the
// same value (NaN compares unequal, so it is left out).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("a\x03i\x00\x00\x00\x00\x00\x00\x00\x01s\x021xn"))
	f.Add([]byte("a\xffa\xffa\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		v := fuzzreply.Decode(data)
		b, err := fuzzreply.Encode(v)
		if err != nil {
			t.Fatalf("Encode(Decode(%q)): %v", data, err)
		}
		if w := fuzzreply.Decode(b); !hasNaN(v) && !reflect.DeepEqual(w, v) {
			t.Fatalf("%#v re-decoded as %#v", v, w)
		}
	})
}

func hasNaN(v any) bool {
	switch x := v.(type) {
	case float64:
		return math.IsNaN(x)
	case []any:
		for _, e := range x {
			if hasNaN(e) {
				return true
			}
		}
	}
	return false
}
