package creds

import (
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/fuzzreply"
)

// A realistic stats.lua reply: now, waiting, then per credential {id, max,
// limits, disabled, disabled_reason, disabled_at, rest_until, rest_reason,
// rest_cause, last_used (a ZSET score), starts, rate_limited, pace_us,
// next_us, {member, expiry, ...}, {used, of, next, ...}, disabled_by,
// enabled_by, enabled_reason, enabled_at, refused, groups, {scope,
// until, reason, ...}}.
var statsSeed = []any{
	"1700000000000000", int64(0),
	[]any{"key-a", "1", "", "0", "", "0", "0", "", "", "1699999999000000", "0", "0", "0", "1700000000000000", []any{}, []any{},
		"", "probe", "probe GET https://api.example.com/v1/models answered 200", "1699999998000000", "b/i1: 401 invalid key", "", []any{}, "*org-a", ""},
	[]any{"key-b", "2", "w60/60000000;c6000/10000000", "0", "", "0", "1700000005000000", "429 from the API", "retry-after header",
		"1699999999500000", "12", "1", "0", "1700000005000000",
		[]any{"5|w1/0", "1700000030000000", "6|w2/1", "1700000031000000.5"}, []any{"3", "60", "0", "5000", "6000", "0"},
		"", "", "", "0", "", "llm,emb", []any{"gpt-4o", "1700000009000000", "x-ratelimit-remaining-tokens: 0 tokens left [gpt-4o]"}, "", ""},
	[]any{"key-c", "1", "g10/1000000/1", "1", "401 revoked", "1699999000000000", "0", "", "", "0", "0", "0", "0", "-1", []any{}, []any{"1", "1", "1700000000100000"},
		"api", "operator", "", "1699998000000000", "b/i1: 401 revoked\nb/i2: 401 revoked", "", []any{}, "", ""},
	[]any{"*org-a", "1000000000000", "w30/1000000", "0", "", "0", "1700000002000000", "x-ratelimit-remaining-requests: 0 requests left, 4 needed (3 in flight)",
		"x-ratelimit-remaining-requests", "1699999999000000", "40", "2", "0", "1700000002000000", []any{"7|w1/0", "1700000030000000"},
		[]any{"30", "30", "1700000001000000"}, "", "", "", "0", "", "", []any{}, "", "key-a"},
}

// FuzzDecodeStats feeds the stats script's reply decoder replies of any
// shape: never a panic, and a decoded Stats adds up.
func FuzzDecodeStats(f *testing.F) {
	fuzzreply.FuzzDecoder(f, []any{
		statsSeed,
		[]any{"1700000000000000"},
		[]any{int64(1700000000000000), []any{"x", int64(1), int64(5), int64(-1), int64(1), "", int64(0), int64(0), "", 1.5, int64(9), []any{"|", "1"}}},
		[]any{"1", []any{"x", "1", "1", "9223372036854775807", "0", "", "0", "9223372036854775807", "", "1e308", "0", []any{"-1|o", "-1e308"}}},
		[]any{"1", []any{"x", "0", "0", "0", "0", "", "0", "0", "", "NaN", "0", []any{"1|o"}}},
		[]any{"1", []any{"x"}},
		[]any{},
		"OK",
		nil,
	}, decodeStats, func(t *testing.T, v any, st Stats) {
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

// FuzzDecodeStep feeds the step script's reply decoder replies of any
// shape: never a panic; a decoded reply has one result per op, and a
// grant's fencing member is "<token>|<owner>".
func FuzzDecodeStep(f *testing.F) {
	for _, v := range []any{
		[]any{"1700000000000000", []any{[]any{int64(0)}, []any{int64(1)}}, []any{"ab.1|key-a|42|1700000030000000|1|1700000000000000|w/x|y"}, "-1", int64(2)},
		[]any{"1", []any{[]any{int64(-2), "6000"}, []any{int64(-3), "-1"}}, []any{"ab.2|"}, "0", int64(0)},
		[]any{"1", []any{[]any{int64(-2), "1000", "small c1000/60000000", "big"}, []any{int64(0)}}, []any{"ab.3|!1000|big|small c1000/60000000"}, "0", int64(1)},
		[]any{"1", []any{}, []any{"ab.1|key-a|99999999999999999999|1|1|1|o", "ab.1|key-a|1|2|3"}, "5", int64(0)},
		[]any{"1", []any{[]any{}}, []any{}, "5", int64(0)},
		[]any{int64(1)},
	} {
		f.Add(fuzzreply.MustEncode(v), 2)
	}
	f.Fuzz(func(t *testing.T, data []byte, nops int) {
		v := fuzzreply.Decode(data)
		r, err := decodeStep(v, nops)
		if err != nil {
			return
		}
		if len(r.results) != nops {
			t.Fatalf("%d results for %d ops from %#v", len(r.results), nops, v)
		}
		for _, g := range r.grants {
			if !g.lost && g.member() != strconv.FormatUint(g.token, 10)+"|"+g.owner {
				t.Fatalf("grant %+v from %#v", g, v)
			}
		}
	})
}

// A grant's fields come back as the script wrote them; an owner may hold
// '|'; "wid|" is a lost grant; anything shorter or not a number is an
// error naming the field.
func TestDecodeGrant(t *testing.T) {
	g, err := decodeGrant("ab.1|key-a|42|1700000030000000|3|1700000000000000|w-1/item|x")
	want := grant{wid: "ab.1", id: "key-a", token: 42, expires: time.UnixMicro(1700000030000000), cost: 3,
		owner: "w-1/item|x", at: time.UnixMicro(1700000000000000)}
	if err != nil || g != want {
		t.Fatalf("decodeGrant = %+v, %v; want %+v", g, err, want)
	}
	if g, err := decodeGrant("ab.2|"); err != nil || !g.lost || g.wid != "ab.2" {
		t.Fatalf("lost grant: %+v, %v", g, err)
	}
	g, err = decodeGrant("ab.3|!1000|big|small c1000/60000000")
	if err != nil || g.wid != "ab.3" || g.lost || g.neverFits == nil ||
		*g.neverFits != (neverFits{max: 1000, by: "small c1000/60000000", disabled: "big"}) {
		t.Fatalf("never fits: %+v, %v", g, err)
	}
	if ce := (&waiter{cost: 5000}).costError(g.neverFits.max, g.neverFits.by, g.neverFits.disabled); ce.Limits != "small cost=1000/m" ||
		ce.Error() != "creds: cost never fits: cost 5000 is above the largest any usable credential takes (1000, credential small cost=1000/m); it fits only disabled credentials (big)" {
		t.Fatalf("its error: %q (limits %q)", ce.Error(), ce.Limits)
	}
	for _, bad := range []any{"ab.1", "ab.1|key-a|42|1|3", "ab.1|key-a|x|1|3|1|o", "ab.1|key-a|1|1|3|1.5|o", int64(1),
		"ab.3|!1000|big", "ab.3|!x|big|by"} {
		if g, err := decodeGrant(bad); err == nil {
			t.Errorf("decodeGrant(%#v) = %+v, want an error", bad, g)
		}
	}
}

func TestStatsSeedDecodes(t *testing.T) {
	st, err := decodeStats(statsSeed)
	if err != nil {
		t.Fatal(err)
	}
	b := st.Credentials[1]
	if len(b.Groups) != 2 || len(b.ScopeRests) != 1 || b.ScopeRests[0].Scope != "gpt-4o" {
		t.Fatalf("key-b: groups %v, scope rests %+v", b.Groups, b.ScopeRests)
	}
	if a := st.Credentials[0]; a.Account != "org-a" {
		t.Fatalf("key-a: account %q, want org-a", a.Account)
	}
	if len(st.Credentials) != 3 || len(st.Accounts) != 1 {
		t.Fatalf("%d credentials and %d accounts, want 3 and 1", len(st.Credentials), len(st.Accounts))
	}
	a := st.Accounts[0]
	if a.ID != "org-a" || a.State != StateCooling || len(a.Keys) != 1 || a.Keys[0] != "key-a" || a.InFlight != 1 ||
		len(a.Limits) != 1 || a.Limits[0].Used != 30 || a.RestCause != "x-ratelimit-remaining-requests" {
		t.Fatalf("account: %+v", a)
	}
}
