package jsonl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

func TestScope(t *testing.T) {
	for _, c := range []struct {
		obj  string
		want string
		ok   bool
		err  string
	}{
		{`{"id":1,"model":"gpt-4o"}`, "gpt-4o", true, ""},
		{`{"id":1,"model":"a\/b\u0040c"}`, "a/b@c", true, ""},
		{`{"id":1,"model":""}`, "", true, ""},
		{`{"id":1}`, "", false, ""},
		{`{"id":1,"model":null}`, "", false, ""},
		{`{"id":1,"nested":{"model":"x"}}`, "", false, ""},
		{`{"id":1,"model":4}`, "", false, `field "model" is a number, want a string`},
		{`{"id":1,"model":["x"]}`, "", false, `field "model" is an array, want a string`},
		{`{"id":1,"model":true}`, "", false, `field "model" is a boolean`},
	} {
		got, ok, err := jsonl.Scope([]byte(c.obj), "model")
		switch {
		case c.err == "" && (err != nil || got != c.want || ok != c.ok):
			t.Errorf("Scope(%s) = %q, %v, %v; want %q, %v", c.obj, got, ok, err, c.want, c.ok)
		case c.err != "" && (!errors.Is(err, jsonl.ErrBadScope) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Scope(%s) = %q, %v; want an ErrBadScope saying %q", c.obj, got, err, c.err)
		}
	}
}
