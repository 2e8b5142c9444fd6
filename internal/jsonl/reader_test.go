package jsonl_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// outcome is what one call of Next gave, in a comparable form.
type outcome struct {
	line  int
	id    string
	raw   string
	err   error // the sentinel
	first int
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("line %d id %q: %v (first %d)", o.line, o.id, o.err, o.first)
	}
	return fmt.Sprintf("line %d id %q: %s", o.line, o.id, o.raw)
}

// readAll reads open() to its end, then (without AllowDuplicates) finds
// the duplicates by reading open() again, and returns every item and line
// error in line order; a repeated line is reported as a duplicate, not as
// an item.
func readAll(t *testing.T, open func() io.Reader, o jsonl.Options) []outcome {
	t.Helper()
	rd, err := jsonl.NewReader(open(), o)
	if err != nil {
		t.Fatal(err)
	}
	var out []outcome
	problem := func(le *jsonl.LineError) {
		for _, s := range []error{jsonl.ErrSyntax, jsonl.ErrNotObject, jsonl.ErrNoID, jsonl.ErrEmptyID,
			jsonl.ErrBadID, jsonl.ErrDuplicateID, jsonl.ErrTooLong, jsonl.ErrNotUTF8} {
			if errors.Is(le, s) {
				out = append(out, outcome{line: le.Line, id: le.ID, err: s, first: le.FirstLine})
			}
		}
	}
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		var le *jsonl.LineError
		switch {
		case errors.As(err, &le):
			problem(le)
		case err != nil:
			t.Fatalf("unexpected error: %v", err)
		default:
			out = append(out, outcome{line: it.Line, id: it.ID, raw: string(it.Raw)})
		}
	}
	if o.AllowDuplicates {
		return out
	}
	dups := map[int]bool{}
	if err := rd.Duplicates(open(), func(le *jsonl.LineError) { dups[le.Line] = true; problem(le) }); err != nil {
		t.Fatalf("Duplicates: %v", err)
	}
	kept := out[:0]
	for _, o := range out {
		if !(dups[o.line] && o.err == nil) {
			kept = append(kept, o)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].line < kept[j].line })
	return kept
}

func text(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }

func TestReader(t *testing.T) {
	long := `{"id":"big","pad":"` + strings.Repeat("x", 200) + `"}`
	tests := []struct {
		name string
		in   string
		opts jsonl.Options
		want []outcome
	}{
		{"empty input", "", jsonl.Options{}, nil},
		{"only blank lines", "\n  \n\t\r\n", jsonl.Options{}, nil},
		{"two items, no final newline", "{\"id\":\"a\",\"x\":1}\n{\"id\":\"b\"}", jsonl.Options{},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a","x":1}`}, {line: 2, id: "b", raw: `{"id":"b"}`}}},
		{"blank lines count, CRLF and blanks trimmed", "\r\n  {\"id\":\"a\"}  \r\n\n{\"id\":\"b\"}\r\n", jsonl.Options{},
			[]outcome{{line: 2, id: "a", raw: `{"id":"a"}`}, {line: 4, id: "b", raw: `{"id":"b"}`}}},
		{"byte order mark", "\xEF\xBB\xBF{\"id\":\"a\"}\n", jsonl.Options{}, []outcome{{line: 1, id: "a", raw: `{"id":"a"}`}}},
		{"integer IDs use their text", `{"id":7}` + "\n" + `{"id":-30}` + "\n" + `{"id":12345678901234567890123}`, jsonl.Options{},
			[]outcome{{line: 1, id: "7", raw: `{"id":7}`}, {line: 2, id: "-30", raw: `{"id":-30}`},
				{line: 3, id: "12345678901234567890123", raw: `{"id":12345678901234567890123}`}}},
		{"escapes in the ID and in the key", `{"\u0069d":"a\"b\u00e9"}`, jsonl.Options{},
			[]outcome{{line: 1, id: "a\"bé", raw: `{"\u0069d":"a\"b\u00e9"}`}}},
		{"ID after nested values", `{"x":{"id":"inner","y":[1,{"id":2}]},"s":"{\"id\":3}","id":"outer"}`, jsonl.Options{},
			[]outcome{{line: 1, id: "outer", raw: `{"x":{"id":"inner","y":[1,{"id":2}]},"s":"{\"id\":3}","id":"outer"}`}}},
		{"another ID field", `{"id":"no","key":"k1"}`, jsonl.Options{IDField: "key"},
			[]outcome{{line: 1, id: "k1", raw: `{"id":"no","key":"k1"}`}}},
		{"malformed", "{\"id\":\"a\"}\n{\"id\":\"b\",}\n{\"id\":\"c\"}\n", jsonl.Options{},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a"}`}, {line: 2, err: jsonl.ErrSyntax}, {line: 3, id: "c", raw: `{"id":"c"}`}}},
		{"two values on a line", `{"id":"a"} {"id":"b"}`, jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrSyntax}}},
		{"not an object", "[1,2]\n\"s\"\n3\nnull\n", jsonl.Options{},
			[]outcome{{line: 1, err: jsonl.ErrNotObject}, {line: 2, err: jsonl.ErrNotObject}, {line: 3, err: jsonl.ErrNotObject}, {line: 4, err: jsonl.ErrNotObject}}},
		{"missing ID", `{"name":"x"}`, jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrNoID}}},
		{"ID only nested", `{"x":{"id":"a"}}`, jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrNoID}}},
		{"empty ID", `{"id":""}`, jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrEmptyID}}},
		{"ID of a wrong type", "{\"id\":null}\n{\"id\":true}\n{\"id\":{}}\n{\"id\":[1]}\n{\"id\":1.5}\n{\"id\":1e3}\n", jsonl.Options{},
			[]outcome{{line: 1, err: jsonl.ErrBadID}, {line: 2, err: jsonl.ErrBadID}, {line: 3, err: jsonl.ErrBadID},
				{line: 4, err: jsonl.ErrBadID}, {line: 5, err: jsonl.ErrBadID}, {line: 6, err: jsonl.ErrBadID}}},
		{"ID field twice", `{"id":"a","id":"b"}`, jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrBadID}}},
		{"CheckID rejects", `{"id":"a b"}`, jsonl.Options{CheckID: func(id string) error {
			if strings.Contains(id, " ") {
				return errors.New("holds a space")
			}
			return nil
		}}, []outcome{{line: 1, id: "a b", err: jsonl.ErrBadID}}},
		{"duplicate names the first line", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n\n{\"id\":\"a\"}\n{\"id\":\"a\"}\n", jsonl.Options{},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a"}`}, {line: 2, id: "b", raw: `{"id":"b"}`},
				{line: 4, id: "a", err: jsonl.ErrDuplicateID, first: 1}, {line: 5, id: "a", err: jsonl.ErrDuplicateID, first: 1}}},
		{"integer and string IDs with the same text are the same", "{\"id\":1}\n{\"id\":\"1\"}\n", jsonl.Options{},
			[]outcome{{line: 1, id: "1", raw: `{"id":1}`}, {line: 2, id: "1", err: jsonl.ErrDuplicateID, first: 1}}},
		{"duplicates allowed", "{\"id\":\"a\"}\n{\"id\":\"a\"}\n", jsonl.Options{AllowDuplicates: true},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a"}`}, {line: 2, id: "a", raw: `{"id":"a"}`}}},
		{"not UTF-8", "{\"id\":\"a\"}\n{\"id\":\"b\xff\"}\n{\"id\":\"c\"}\n", jsonl.Options{},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a"}`}, {line: 2, err: jsonl.ErrNotUTF8}, {line: 3, id: "c", raw: `{"id":"c"}`}}},
		{"UTF-16", "\xff\xfe{\x00}\x00", jsonl.Options{}, []outcome{{line: 1, err: jsonl.ErrNotUTF8}}},
		{"too long, ID in the head", "{\"id\":\"a\"}\n" + long + "\n{\"id\":\"c\"}\n", jsonl.Options{MaxLine: 64},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a"}`}, {line: 2, id: "big", err: jsonl.ErrTooLong}, {line: 3, id: "c", raw: `{"id":"c"}`}}},
		{"too long, ID past the head", `{"pad":"` + strings.Repeat("y", 300) + `","id":"z"}` + "\n{\"id\":\"c\"}", jsonl.Options{MaxLine: 64},
			[]outcome{{line: 1, err: jsonl.ErrTooLong}, {line: 2, id: "c", raw: `{"id":"c"}`}}},
		{"too long as the last line", long, jsonl.Options{MaxLine: 64}, []outcome{{line: 1, id: "big", err: jsonl.ErrTooLong}}},
		{"exactly the limit fits", `{"id":"a","p":"` + strings.Repeat("q", 64-17) + `"}`, jsonl.Options{MaxLine: 64},
			[]outcome{{line: 1, id: "a", raw: `{"id":"a","p":"` + strings.Repeat("q", 64-17) + `"}`}}},
		{"one byte over the limit", `{"id":"a","p":"` + strings.Repeat("q", 65-17) + `"}`, jsonl.Options{MaxLine: 64},
			[]outcome{{line: 1, id: "a", err: jsonl.ErrTooLong}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readAll(t, text(tc.in), tc.opts)
			// The same with a reader that returns one byte at a time.
			got1 := readAll(t, func() io.Reader { return iotest.OneByteReader(strings.NewReader(tc.in)) }, tc.opts)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("want\n%v\ngot\n%v", tc.want, got)
			}
			if fmt.Sprint(got1) != fmt.Sprint(tc.want) {
				t.Fatalf("one byte at a time: want\n%v\ngot\n%v", tc.want, got1)
			}
		})
	}
}

func TestLineErrorMessage(t *testing.T) {
	in := "{\"id\":\"a\"}\n{\"id\":\"a\"}\n{\"x\":1}\n{\"id\":\"b\",,}\n"
	rd, _ := jsonl.NewReader(strings.NewReader(in), jsonl.Options{})
	var msgs []string
	for {
		_, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if err := rd.Duplicates(strings.NewReader(in), func(le *jsonl.LineError) { msgs = append(msgs, le.Error()) }); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`line 3: no ID: no field "id"`,
		`line 4: malformed JSON: invalid character ',' looking for beginning of object key string (column 11)`,
		`line 2: item "a": duplicate ID (first on line 1)`,
	}
	if fmt.Sprint(msgs) != fmt.Sprint(want) {
		t.Fatalf("want\n%q\ngot\n%q", want, msgs)
	}
}

func TestLongLineIsNotHeldWhole(t *testing.T) {
	// 64 MiB of one line, produced on the fly, with a 1 KiB limit: the
	// reader must skip it with its 1 KiB buffer.
	const size = 64 << 20
	body := func() io.Reader {
		return io.MultiReader(strings.NewReader(`{"id":"huge","pad":"`), &repeatReader{b: 'x', n: size},
			strings.NewReader("\"}\n{\"id\":\"next\"}\n"))
	}
	got := readAll(t, body, jsonl.Options{MaxLine: 1024})
	want := []outcome{{line: 1, id: "huge", err: jsonl.ErrTooLong}, {line: 2, id: "next", raw: `{"id":"next"}`}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("want %v got %v", want, got)
	}
}

type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

func TestReadErrorIsFinal(t *testing.T) {
	boom := errors.New("disk on fire")
	rd, _ := jsonl.NewReader(io.MultiReader(strings.NewReader("{\"id\":\"a\"}\n"), iotest.ErrReader(boom)), jsonl.Options{})
	if it, err := rd.Next(); err != nil || it.ID != "a" {
		t.Fatalf("first: %v %v", it, err)
	}
	for range 2 {
		if _, err := rd.Next(); !errors.Is(err, boom) {
			t.Fatalf("want the read error, got %v", err)
		}
	}
}

func TestCountsAndIDs(t *testing.T) {
	rd, _ := jsonl.NewReader(strings.NewReader("{\"id\":\"a\"}\n\n{\"id\":2}\nbad\n"), jsonl.Options{})
	for {
		if _, err := rd.Next(); err == io.EOF {
			break
		}
	}
	if rd.Line() != 4 || rd.Items() != 2 || rd.IDs().Len() != 2 {
		t.Fatalf("lines %d items %d ids %d", rd.Line(), rd.Items(), rd.IDs().Len())
	}
	if !rd.IDs().Has(rd.IDs().Key("2")) || !rd.IDs().Has(rd.IDs().Key("a")) {
		t.Fatal("a and 2 are in the set")
	}
	if rd.IDs().Has(rd.IDs().Key("zz")) {
		t.Fatal("zz is not in the set")
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := jsonl.NewReader(strings.NewReader(""), jsonl.Options{MaxLine: -1}); err == nil {
		t.Fatal("a negative MaxLine must be refused")
	}
}

func BenchmarkReader(b *testing.B) {
	var buf bytes.Buffer
	for i := range 10000 {
		fmt.Fprintf(&buf, "{\"id\":\"item-%06d\",\"ms\":5,\"text\":\"some words here\"}\n", i)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rd, _ := jsonl.NewReader(bytes.NewReader(data), jsonl.Options{})
		for {
			if _, err := rd.Next(); err == io.EOF {
				break
			}
		}
	}
}
