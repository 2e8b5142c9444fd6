package jsonl_test

import (
	"encoding/json"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

func TestWithout(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"id":"a","model":"m","messages":[]}`, `{"model":"m","messages":[]}`},
		{`{"model":"m","id":"a","messages":[]}`, `{"model":"m","messages":[]}`},
		{`{"model":"m","messages":[],"id":"a"}`, `{"model":"m","messages":[]}`},
		{`{"id":"a"}`, `{}`},
		{`{ "id" : 7 , "model" : "m" }`, `{ "model" : "m" }`},
		{`{"model":"m", "id": "a", "x": {"id": "inner"}}`, `{"model":"m", "x": {"id": "inner"}}`},
		{`{"i\u0064":"a","model":"m"}`, `{"model":"m"}`},
		{`{"model":"m"}`, `{"model":"m"}`},
		{`{"id":1,"id":2,"m":3}`, `{"m":3}`},
		{`{"a":1,"id":2,"b":3,"id":4}`, `{"a":1,"b":3}`},
		{`[1,2]`, `[1,2]`},
	} {
		got := string(jsonl.Without([]byte(tc.in), "id"))
		if got != tc.want {
			t.Errorf("Without(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("Without(%s) = %s: not JSON", tc.in, got)
		}
	}
}

// FuzzWithout: the result is valid JSON, has no "id" member, and holds
// every other member with its value unchanged.
func FuzzWithout(f *testing.F) {
	f.Add(`{"id":"a","model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"x":1,"id":{"id":2},"y":[3]}`)
	f.Add(`{ "id" : "a" }`)
	f.Fuzz(func(t *testing.T, in string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(in), &m) != nil {
			return
		}
		out := jsonl.Without([]byte(in), "id")
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("Without(%s) = %s: %v", in, out, err)
		}
		if _, ok := got["id"]; ok {
			t.Fatalf("Without(%s) = %s kept id", in, out)
		}
		delete(m, "id")
		if len(got) != len(m) {
			t.Fatalf("Without(%s) = %s: members %d, want %d", in, out, len(got), len(m))
		}
		for k, v := range m {
			if string(got[k]) != string(v) {
				t.Fatalf("Without(%s) = %s: %s changed", in, out, k)
			}
		}
	})
}
