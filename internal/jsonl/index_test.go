package jsonl_test

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// readIDs reads in with o and returns the set of its IDs.
func readIDs(t *testing.T, in string, o jsonl.Options) *jsonl.IDs {
	t.Helper()
	rd, err := jsonl.NewReader(strings.NewReader(in), o)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := rd.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return rd.IDs()
}

// Index gives every ID of a set its own place below Len() (across
// chunks), none to an ID outside it; IDs whose first hashes collide share
// one and are Shared.
func TestIDsIndex(t *testing.T) {
	var b strings.Builder
	const n = 10000 // more than one chunk
	for i := range n {
		fmt.Fprintf(&b, `{"id":"item-%d"}`+"\n", i)
	}
	ids := readIDs(t, b.String(), jsonl.Options{})
	seen := make([]bool, ids.Len())
	for i := range n {
		k := ids.Key(fmt.Sprintf("item-%d", i))
		at, ok := ids.Index(k)
		if !ok || at < 0 || at >= ids.Len() || seen[at] || ids.Shared(k) {
			t.Fatalf("item-%d: index %d %v (seen before: %v, shared: %v)", i, at, ok, ok && seen[at], ids.Shared(k))
		}
		seen[at] = true
	}
	if _, ok := ids.Index(ids.Key("not-there")); ok {
		t.Fatal("an ID outside the set has an index")
	}

	// "a1" and "a2" collide on the first hash (the first byte); "b" does not.
	first := jsonl.WithHash(jsonl.Options{}, func(id string) uint64 { return uint64(id[0]) })
	ids = readIDs(t, "{\"id\":\"a1\"}\n{\"id\":\"b\"}\n{\"id\":\"a2\"}\n", first)
	a1, _ := ids.Index(ids.Key("a1"))
	a2, _ := ids.Index(ids.Key("a2"))
	bi, _ := ids.Index(ids.Key("b"))
	if a1 != a2 || a1 == bi || !ids.Shared(ids.Key("a1")) || !ids.Shared(ids.Key("a2")) || ids.Shared(ids.Key("b")) {
		t.Fatalf("a1 %d, a2 %d, b %d; shared: %v %v %v", a1, a2, bi, ids.Shared(ids.Key("a1")), ids.Shared(ids.Key("a2")), ids.Shared(ids.Key("b")))
	}
}
