package ratelimit_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

func TestInt64s(t *testing.T) {
	good := []struct {
		reply any
		want  []int64
	}{
		{[]any{int64(1), int64(-2), "3"}, []int64{1, -2, 3}},
		{[]any{}, []int64{}},
	}
	for _, tt := range good {
		got, err := ratelimit.Int64s(tt.reply, len(tt.want))
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Int64s(%#v, %d) = %v, %v; want %v", tt.reply, len(tt.want), got, err, tt.want)
		}
	}
	bad := []struct {
		reply any
		want  int
	}{
		{nil, 1},
		{int64(1), 1},
		{"1", 1},
		{[]string{"1"}, 1},
		{[]any{int64(1)}, 2},
		{[]any{int64(1), int64(2)}, 1},
		{[]any{int64(1), nil}, 2},
		{[]any{int64(1), 2.5}, 2},
		{[]any{int64(1), "2.5"}, 2},
		{[]any{[]any{int64(1)}}, 1},
		{[]any{true}, 1},
	}
	for _, tt := range bad {
		got, err := ratelimit.Int64s(tt.reply, tt.want)
		if err == nil {
			t.Errorf("Int64s(%#v, %d) = %v, want an error", tt.reply, tt.want, got)
		}
	}
}

func TestInt64(t *testing.T) {
	good := map[any]int64{int64(42): 42, "42": 42, "-7": -7, int64(math.MinInt64): math.MinInt64}
	for in, want := range good {
		if got, err := ratelimit.Int64(in); err != nil || got != want {
			t.Errorf("Int64(%#v) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []any{nil, "", " 1", "1.5", "1e3", "x", "99999999999999999999", 1.0, 1, int32(1), true, []byte("1"), []any{int64(1)}} {
		if got, err := ratelimit.Int64(in); err == nil {
			t.Errorf("Int64(%#v) = %d, want an error", in, got)
		}
	}
}

func TestFloat64(t *testing.T) {
	good := map[any]float64{int64(3): 3, "1.5": 1.5, "-1": -1, "123456.789": 123456.789, 2.5: 2.5}
	for in, want := range good {
		if got, err := ratelimit.Float64(in); err != nil || got != want {
			t.Errorf("Float64(%#v) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []any{nil, "", "abc", "NaN", "Inf", "-Inf", "1e999", math.NaN(), math.Inf(1), true, float32(1), []any{"1"}} {
		if got, err := ratelimit.Float64(in); err == nil {
			t.Errorf("Float64(%#v) = %v, want an error", in, got)
		}
	}
}

func ExampleInt64s() {
	v, err := ratelimit.Int64s([]any{int64(1), "2"}, 2)
	fmt.Println(v, err)
	_, err = ratelimit.Int64s("OK", 2)
	fmt.Println(err)
	// Output:
	// [1 2] <nil>
	// unexpected script reply string, want an array
}
