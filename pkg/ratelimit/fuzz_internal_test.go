package ratelimit

import (
	"math"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/fuzzreply"
)

// FuzzDecodeGCRA feeds the GCRA script's reply decoder replies of any
// shape: never a panic; a decoded result has no negative remaining count
// or reset, and a retry-after of -1 (none) or at least 0.
func FuzzDecodeGCRA(f *testing.F) {
	fuzzreply.FuzzDecoder(f, []any{
		[]any{int64(1), int64(4), "-1", "250000"},
		[]any{int64(0), int64(0), "12345.678", "1000000"},
		[]any{int64(1), int64(-3), "1e300", "-5"},
		[]any{int64(1), int64(1), "NaN", "0"},
		[]any{int64(1), int64(1), math.Inf(1), "0"},
		[]any{int64(1), int64(1), 2.5, int64(3)},
		[]any{"1", "2", "3"},
		[]any{nil, nil, nil, nil},
		"OK",
		nil,
	}, decodeGCRA, func(t *testing.T, v any, res Result) {
		if res.Remaining < 0 || res.ResetAfter < 0 || res.RetryAfter < -1 {
			t.Fatalf("decodeGCRA(%#v) = %+v", v, res)
		}
	})
}
