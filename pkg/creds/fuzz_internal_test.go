package creds

import (
	"sort"
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/fuzzreply"
)

// A realistic stats.lua reply: now, then per credential {id, max, rate_n,
// rate_us, disabled, disabled_reason, disabled_at, cool_until, cool_reason,
// last_used (a ZSET score), starts (a Lua number), {member, expiry, ...}}.
var statsSeed = []any{
	"1700000000000000",
	[]any{"key-a", "1", "0", "0", "0", "", "0", "0", "", "1699999999000000", int64(0), []any{}},
	[]any{"key-b", "2", "60", "60000000", "0", "", "0", "1700000005000000", "429 from the API", "1699999999500000", int64(3),
		[]any{"5|w1/0", "1700000030000000", "6|w2/1", "1700000031000000.5"}},
	[]any{"key-c", "1", "0", "0", "1", "401 revoked", "1699999000000000", "0", "", "0", int64(0), []any{}},
}

// FuzzDecodeStats feeds the stats script's reply decoder replies of any
// shape: never a panic, and a decoded Stats adds up.
func FuzzDecodeStats(f *testing.F) {
	for _, v := range []any{
		statsSeed,
		[]any{"1700000000000000"},
		[]any{int64(1700000000000000), []any{"x", int64(1), int64(5), int64(-1), int64(1), "", int64(0), int64(0), "", 1.5, int64(9), []any{"|", "1"}}},
		[]any{"1", []any{"x", "1", "1", "9223372036854775807", "0", "", "0", "9223372036854775807", "", "1e308", "0", []any{"-1|o", "-1e308"}}},
		[]any{"1", []any{"x", "0", "0", "0", "0", "", "0", "0", "", "NaN", "0", []any{"1|o"}}},
		[]any{"1", []any{"x"}},
		[]any{},
		"OK",
		nil,
	} {
		f.Add(fuzzreply.MustEncode(v))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := fuzzreply.Decode(data)
		st, err := decodeStats(v)
		if err != nil {
			return
		}
		inFlight := 0
		for _, c := range st.Credentials {
			switch c.State {
			case StateAvailable, StateBusy, StateCooling, StateDisabled:
			default:
				t.Fatalf("state %q in %#v", c.State, v)
			}
			if c.InFlight != len(c.Holders) {
				t.Fatalf("in flight %d with %d holders", c.InFlight, len(c.Holders))
			}
			inFlight += c.InFlight
		}
		if st.Total != len(st.Credentials) || st.InFlight != inFlight || st.Leased > st.Total ||
			st.Available+st.Cooling+st.Disabled > st.Total {
			t.Fatalf("stats do not add up: %+v\nfrom %#v", st, v)
		}
		if !sort.SliceIsSorted(st.Credentials, func(i, j int) bool { return st.Credentials[i].ID < st.Credentials[j].ID }) {
			t.Fatalf("credentials not sorted by ID: %+v", st.Credentials)
		}
	})
}

// FuzzDecodeLease feeds the acquire script's grant decoder replies of any
// shape: never a panic; a lease names its credential and owner, and its
// fencing member is "<token>|<owner>".
func FuzzDecodeLease(f *testing.F) {
	for _, v := range []any{
		[]any{int64(1), "key-a", "42", "1700000030000000", "1700000000000000"},
		[]any{int64(1), "key-a", int64(42), "1", "2"},
		[]any{int64(1), "key-a", "-1", "1", "2"},
		[]any{int64(1), "key-a", "99999999999999999999", "1", "2"},
		[]any{int64(1), nil, "1", "1", "2"},
		[]any{int64(1)},
	} {
		f.Add(fuzzreply.MustEncode(v), "w1/0")
	}
	p := &Pool{}
	f.Fuzz(func(t *testing.T, data []byte, owner string) {
		arr, ok := fuzzreply.Decode(data).([]any)
		if !ok {
			return
		}
		l, err := p.decodeLease(arr, owner)
		if err != nil {
			return
		}
		if l.CredentialID != arr[1] || l.Owner != owner || l.member != arr[2].(string)+"|"+owner {
			t.Fatalf("lease %+v from %#v", l, arr)
		}
	})
}
