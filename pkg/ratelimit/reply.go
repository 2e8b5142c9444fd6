package ratelimit

import (
	"fmt"
	"math"
	"strconv"
)

// Int64s decodes a Lua script's array reply of want integers (integer or
// numeric-string elements) with checked type assertions, so that a reply of
// an unexpected shape is an error, never a panic. pkg/creds uses it too.
func Int64s(reply any, want int) ([]int64, error) {
	arr, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected script reply %T, want an array", reply)
	}
	if len(arr) != want {
		return nil, fmt.Errorf("unexpected script reply: %d elements, want %d", len(arr), want)
	}
	out := make([]int64, want)
	for i, e := range arr {
		v, err := Int64(e)
		if err != nil {
			return nil, fmt.Errorf("script reply element %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// Int64 decodes one integer reply element: an integer, or a string holding
// one (scripts return large or fractional numbers as strings because Redis
// truncates Lua numbers to integers).
func Int64(e any) (int64, error) {
	switch x := e.(type) {
	case int64:
		return x, nil
	case string:
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("not an integer: %q", x)
		}
		return v, nil
	default:
		return 0, fmt.Errorf("unexpected type %T, want an integer", e)
	}
}

// Float64 decodes a reply element holding a finite number as a string, an
// integer or (RESP3) a double. NaN and infinities are errors: no script
// reply means them, and they would turn into nonsense durations.
func Float64(e any) (float64, error) {
	var v float64
	switch x := e.(type) {
	case int64:
		return float64(x), nil
	case float64:
		v = x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, fmt.Errorf("not a number: %q", x)
		}
		v = f
	default:
		return 0, fmt.Errorf("unexpected type %T, want a number", e)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a finite number: %v", e)
	}
	return v, nil
}
