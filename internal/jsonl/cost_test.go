package jsonl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

func TestCost(t *testing.T) {
	for _, c := range []struct {
		obj   string
		field string
		want  int64
		err   string
	}{
		{`{"id":1,"cost":1500}`, "cost", 1500, ""},
		{`{"id":1,"cost":12.2}`, "cost", 13, ""},
		{`{"id":1,"cost":0}`, "cost", 1, ""},
		{`{"id":1}`, "cost", 7, ""},
		{`{"id":1,"cost":null}`, "cost", 7, ""},
		{`{"id":1,"nested":{"cost":5},"tokens":2e3}`, "tokens", 2000, ""},
		{`{"id":1,"nested":{"cost":5}}`, "cost", 7, ""},
		{`{"id":1,"cost":"100"}`, "cost", 0, `field "cost" is a string, want a number`},
		{`{"id":1,"cost":-3}`, "cost", 0, `field "cost" is -3`},
		{`{"id":1,"cost":[1]}`, "cost", 0, `is an array`},
		{`{"id":1,"cost":1e400}`, "cost", 0, `want a number`},
	} {
		got, err := jsonl.Cost([]byte(c.obj), c.field, 7)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Cost(%s, %q) = %d, %v; want %d", c.obj, c.field, got, err, c.want)
		case c.err != "" && (!errors.Is(err, jsonl.ErrBadCost) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Cost(%s, %q) = %d, %v; want an ErrBadCost saying %q", c.obj, c.field, got, err, c.err)
		}
	}
}

func FuzzCost(f *testing.F) {
	f.Add([]byte(`{"cost":3.5}`), "cost")
	f.Add([]byte(`{"a":{"cost":1},"cost":"x"}`), "cost")
	f.Fuzz(func(t *testing.T, obj []byte, field string) {
		n, err := jsonl.Cost(obj, field, 1)
		if err == nil && n < 1 {
			t.Fatalf("cost %d from %q", n, obj)
		}
	})
}

// A field given twice has its last value, as the APIs read it: an item
// is charged and scoped as the API will run it.
func TestFieldTakesTheLastOfRepeats(t *testing.T) {
	obj := []byte(`{"model":"gpt-4o-mini","cost":1,"x":{"model":"inner"},"model":"gpt-4o","cost":9000}`)
	if v, ok := jsonl.Field(obj, "model"); !ok || string(v) != `"gpt-4o"` {
		t.Errorf("model: %s %v, want the last, \"gpt-4o\"", v, ok)
	}
	if c, err := jsonl.Cost(obj, "cost", 1); err != nil || c != 9000 {
		t.Errorf("cost: %d %v, want the last, 9000", c, err)
	}
	if s, _, err := jsonl.Scope(obj, "model"); err != nil || s != "gpt-4o" {
		t.Errorf("scope: %q %v", s, err)
	}
}
