package ratelimit_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/fuzzreply"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// FuzzReply feeds Int64s, Int64 and Float64 script replies of any shape
// (fuzzreply: nested arrays of integers, strings, floats, booleans and
// nils): never a panic, and what they accept is what the reply holds.
func FuzzReply(f *testing.F) {
	for _, seed := range []struct {
		v    any
		want uint8
	}{
		{[]any{int64(1), int64(-2), "3"}, 3},
		{[]any{int64(1), "0", "250000", "1000000"}, 4},
		{[]any{}, 0},
		{[]any{"9223372036854775807", "-9223372036854775808"}, 2},
		{[]any{"9223372036854775808"}, 1},
		{[]any{"1.5", "1e3", " 1", "+1", "0x10"}, 5},
		{[]any{nil, true, 2.5, []any{int64(1)}}, 4},
		{"12", 1},
		{int64(7), 1},
		{1.5, 1},
		{math.NaN(), 1},
		{math.Inf(1), 1},
		{"-1e308", 1},
		{"1e309", 1},
		{"NaN", 1},
		{nil, 0},
	} {
		f.Add(fuzzreply.MustEncode(seed.v), seed.want)
	}
	f.Fuzz(func(t *testing.T, data []byte, want uint8) {
		v := fuzzreply.Decode(data)
		n := int(want % 8)
		if got, err := ratelimit.Int64s(v, n); err == nil {
			arr := v.([]any)
			if len(got) != n || len(arr) != n {
				t.Fatalf("Int64s(%#v, %d) = %v: wrong length", v, n, got)
			}
			for i, e := range arr {
				if x, err := ratelimit.Int64(e); err != nil || x != got[i] {
					t.Fatalf("Int64s(%#v)[%d] = %d, but Int64 of it gives %d, %v", v, i, got[i], x, err)
				}
			}
		}
		for _, e := range append([]any{v}, elems(v)...) {
			if x, err := ratelimit.Int64(e); err == nil {
				switch y := e.(type) {
				case int64:
					if x != y {
						t.Fatalf("Int64(%d) = %d", y, x)
					}
				case string:
					if strconv.FormatInt(x, 10) != y && strconv.FormatInt(x, 10) != trimPlusZeros(y) {
						t.Fatalf("Int64(%q) = %d", y, x)
					}
				default:
					t.Fatalf("Int64 accepted %T", e)
				}
			}
			if x, err := ratelimit.Float64(e); err == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
				t.Fatalf("Float64(%#v) = %v, want an error", e, x)
			}
		}
	})
}

// elems returns the elements of an array reply, one level deep.
func elems(v any) []any {
	arr, _ := v.([]any)
	return arr
}

// trimPlusZeros reads a decimal integer the way strconv.ParseInt accepts
// it (a leading '+', leading zeros) back in canonical form.
func trimPlusZeros(s string) string {
	neg := false
	switch {
	case len(s) > 0 && s[0] == '+':
		s = s[1:]
	case len(s) > 0 && s[0] == '-':
		neg, s = true, s[1:]
	}
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	if neg && s != "0" {
		return "-" + s
	}
	return s
}
