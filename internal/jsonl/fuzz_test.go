package jsonl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// FuzzReader: no input makes the reader panic, loop or break its promises:
// every item is valid UTF-8, one JSON object whose top-level "id" decodes
// to the ID (a string, or an integer's text), at most MaxLine bytes, its
// ID not seen before; line numbers increase; errors are LineErrors.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"", "\n", `{"id":"a"}`, "{\"id\":1}\n{\"id\":\"1\"}", `{"id":1.5}`, `{"id":null}`, `[1]`,
		`{"id":"a","id":"b"}`, `{"\u0069d":"x"}`, "\xEF\xBB\xBF{\"id\":\"a\"}", "{\"id\":\"\xff\"}",
		`{"x":{"id":"in"},"id":"out"}`, `{"id":"` + string(bytes.Repeat([]byte("z"), 80)) + `"}`,
		"{\"id\":\"a\"}\r\n\r\n{\"id\":\"b\"}", `{"id":-0}`, `{"id":"a\u0000"}`, `{"id`, `{"id":`,
	} {
		f.Add([]byte(s))
	}
	const maxLine = 64
	f.Fuzz(func(t *testing.T, data []byte) {
		rd, err := jsonl.NewReader(bytes.NewReader(data), jsonl.Options{MaxLine: maxLine})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		last := 0
		for calls := 0; ; calls++ {
			if calls > len(data)+2 {
				t.Fatalf("more results than lines: %d calls on %d bytes", calls, len(data))
			}
			it, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var le *jsonl.LineError
				if !errors.As(err, &le) {
					t.Fatalf("not a LineError: %v", err)
				}
				if le.Line <= last {
					t.Fatalf("line %d after line %d", le.Line, last)
				}
				last = le.Line
				_ = le.Error()
				continue
			}
			if it.Line <= last {
				t.Fatalf("line %d after line %d", it.Line, last)
			}
			last = it.Line
			if len(it.Raw) > maxLine || !utf8.Valid(it.Raw) {
				t.Fatalf("bad raw %q", it.Raw)
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(it.Raw, &obj); err != nil {
				t.Fatalf("item %q is not an object: %v", it.Raw, err)
			}
			raw, ok := obj["id"]
			if !ok || it.ID == "" {
				t.Fatalf("item %q: ID %q", it.Raw, it.ID)
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				if s != it.ID {
					t.Fatalf("ID %q, want %q", it.ID, s)
				}
			} else if _, err := strconv.ParseFloat(it.ID, 64); err != nil || string(raw) != it.ID {
				t.Fatalf("ID %q from %s", it.ID, raw)
			}
			if seen[it.ID] {
				t.Fatalf("ID %q returned twice", it.ID)
			}
			seen[it.ID] = true
		}
	})
}
