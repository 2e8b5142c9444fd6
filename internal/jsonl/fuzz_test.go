package jsonl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// FuzzReader: no input makes the reader panic, loop or break its promises:
// every item is valid UTF-8, one JSON object whose top-level "id" decodes
// to the ID (a string, or an integer's text), at most MaxLine bytes; line
// numbers increase; errors are LineErrors; Duplicates names exactly the
// lines whose ID an earlier item has, with that first line, also when
// every ID hashes alike (odd inputs) or by the real hash (even ones).
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
		opts := jsonl.Options{MaxLine: maxLine}
		if len(data)%2 == 1 {
			opts = jsonl.WithHash(opts, func(string) uint64 { return 1 })
		}
		rd, err := jsonl.NewReader(bytes.NewReader(data), opts)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		var wantDups []string
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
			if first, ok := seen[it.ID]; ok {
				wantDups = append(wantDups, fmt.Sprintf("%d<%d %q", it.Line, first, it.ID))
				continue
			}
			seen[it.ID] = it.Line
		}
		var gotDups []string
		err = rd.Duplicates(bytes.NewReader(data), func(le *jsonl.LineError) {
			gotDups = append(gotDups, fmt.Sprintf("%d<%d %q", le.Line, le.FirstLine, le.ID))
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(gotDups) != fmt.Sprint(wantDups) {
			t.Fatalf("duplicates: want %v, got %v", wantDups, gotDups)
		}
	})
}

// FuzzAppend: AppendString and AppendFloat write the bytes json.Marshal
// writes for the same string or float64, and refuse what it refuses.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "plain", "\"q\" \\ /", "<a href=x>&</a>", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"\u2028\u2029 é 日本", "bad \xff\xfe utf-8 \xe2\x82", "\xed\xa0\x80"} {
		f.Add(s, 0.0)
	}
	for _, v := range []float64{1, -1.5, 1e-7, 1e-6, 123456789e12, 1e21, 2.5e-300, 0.000123, 1e300, math.NaN(), math.Inf(-1)} {
		f.Add("x", v)
	}
	f.Fuzz(func(t *testing.T, s string, v float64) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonl.AppendString([]byte("prefix"), s); string(got) != "prefix"+string(want) {
			t.Errorf("AppendString(%q) = %s, json.Marshal: %s", s, got[len("prefix"):], want)
		}
		want, err = json.Marshal(v)
		got, ok := jsonl.AppendFloat(nil, v)
		if ok != (err == nil) || ok && string(got) != string(want) {
			t.Errorf("AppendFloat(%v) = %s, %v; json.Marshal: %s, %v", v, got, ok, want, err)
		}
	})
}
