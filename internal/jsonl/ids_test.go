package jsonl_test

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// dupLines reads in with o and returns the duplicates Duplicates reports,
// as "line<first" strings in the order reported, and the set.
func dupLines(t *testing.T, in string, o jsonl.Options) ([]string, *jsonl.IDs) {
	t.Helper()
	rd, err := jsonl.NewReader(strings.NewReader(in), o)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := rd.Next()
		if err == io.EOF {
			break
		}
		var le *jsonl.LineError
		if err != nil && !errors.As(err, &le) {
			t.Fatal(err)
		}
	}
	var got []string
	err = rd.Duplicates(strings.NewReader(in), func(le *jsonl.LineError) {
		if !errors.Is(le, jsonl.ErrDuplicateID) {
			t.Errorf("not a duplicate: %v", le)
		}
		got = append(got, fmt.Sprintf("%d<%d %s", le.Line, le.FirstLine, le.ID))
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, rd.IDs()
}

// Every ID hashes alike: each pair is a suspect, and only the IDs that
// are really equal are duplicates, each naming the line it was first on.
func TestDuplicatesExactUnderForcedCollisions(t *testing.T) {
	same := jsonl.WithHash(jsonl.Options{}, func(string) uint64 { return 42 })
	in := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n\n{\"id\":\"a\"}\n{\"id\":\"c\"}\n{\"id\":\"b\"}\n{\"id\":\"a\"}\n{\"id\":\"a \"}\n"
	got, ids := dupLines(t, in, same)
	want := []string{"4<1 a", "6<2 b", "7<1 a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("want %v, got %v", want, got)
	}
	if ids.Suspects() != 1 || ids.Len() != 7 {
		t.Fatalf("suspects %d (want 1: the one hash), len %d (want 7)", ids.Suspects(), ids.Len())
	}

	// Distinct IDs that collide are not duplicates.
	if got, _ := dupLines(t, "{\"id\":\"x\"}\n{\"id\":\"y\"}\n{\"id\":1}\n", same); len(got) != 0 {
		t.Fatalf("distinct IDs reported as duplicates: %v", got)
	}
	// A line that is not an item (bad JSON) with a colliding ID is no
	// first occurrence: the later good line is no duplicate of it.
	if got, _ := dupLines(t, "{\"id\":\"x\",}\n{\"id\":\"x\"}\n", same); len(got) != 0 {
		t.Fatalf("a bad line counted as the first: %v", got)
	}
	// Only lines that pass every check are items: a bad cost is not one.
	o := jsonl.WithHash(jsonl.Options{CostField: "cost", CostDefault: 1}, func(string) uint64 { return 7 })
	if got, _ := dupLines(t, "{\"id\":\"x\",\"cost\":\"no\"}\n{\"id\":\"x\"}\n{\"id\":\"x\"}\n", o); fmt.Sprint(got) != "[3<2 x]" {
		t.Fatalf("want line 3 a duplicate of line 2 (line 1 is a bad cost), got %v", got)
	}
}

// Collisions between some IDs only (a hash of the first byte): the
// suspects are the colliding hashes, and the input is read again only
// when there is one.
func TestDuplicatesPartialCollisions(t *testing.T) {
	first := jsonl.WithHash(jsonl.Options{}, func(id string) uint64 { return uint64(id[0]) })
	got, ids := dupLines(t, "{\"id\":\"a1\"}\n{\"id\":\"b1\"}\n{\"id\":\"a2\"}\n{\"id\":\"c\"}\n{\"id\":\"a1\"}\n", first)
	if fmt.Sprint(got) != "[5<1 a1]" || ids.Suspects() != 1 {
		t.Fatalf("want line 5 a duplicate of line 1, 1 suspect hash; got %v, %d", got, ids.Suspects())
	}

	// No suspect: the second input is not read at all.
	rd, _ := jsonl.NewReader(strings.NewReader("{\"id\":\"a\"}\n{\"id\":\"b\"}\n"), jsonl.Options{})
	for {
		if _, err := rd.Next(); err == io.EOF {
			break
		}
	}
	if err := rd.Duplicates(errReader{}, func(*jsonl.LineError) { t.Error("no duplicate here") }); err != nil {
		t.Fatalf("the input was read again without a suspect: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

// Over several chunks (the first holds 4,096 hashes): duplicates across
// chunks are found, Has sees every ID, and a different second input is an
// error.
func TestDuplicatesAcrossChunks(t *testing.T) {
	const n = 40_000
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"item-%d\"}\n", i)
	}
	fmt.Fprintf(&b, "{\"id\":\"item-7\"}\n{\"id\":\"item-%d\"}\n", n-1)
	got, ids := dupLines(t, b.String(), jsonl.Options{})
	want := fmt.Sprintf("[%d<8 item-7 %d<%d item-%d]", n+1, n+2, n, n-1)
	if fmt.Sprint(got) != want {
		t.Fatalf("want %s, got %v", want, got)
	}
	for _, id := range []string{"item-0", "item-4095", "item-4096", "item-39999"} {
		if !ids.Has(ids.Key(id)) {
			t.Errorf("%s is in the set", id)
		}
	}
	if ids.Has(ids.Key("item-40000")) {
		t.Error("item-40000 is not in the set")
	}

	rd, _ := jsonl.NewReader(strings.NewReader("{\"id\":\"a\"}\n{\"id\":\"a\"}\n"), jsonl.Options{})
	for {
		if _, err := rd.Next(); err == io.EOF {
			break
		}
	}
	if err := rd.Duplicates(strings.NewReader("{\"id\":\"a\"}\n"), func(*jsonl.LineError) {}); err == nil {
		t.Fatal("a second input with fewer items must be an error")
	}
}

// Memory: 8 bytes an ID, whatever the ID's length: what the set keeps
// after the reading (the heap in use, measured after a collection).
func TestIDsMemory(t *testing.T) {
	const n = 4096 * 63 // fills the chunks of 4,096 to 131,072 hashes exactly
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"%s-%d\"}\n", strings.Repeat("long-id", 10), i)
	}
	in := b.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rd, _ := jsonl.NewReader(strings.NewReader(in), jsonl.Options{MaxLine: 4096})
	for {
		if _, err := rd.Next(); err == io.EOF {
			break
		}
	}
	if rd.IDs().Suspects() != 0 {
		t.Fatal("no suspect expected")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perID := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	runtime.KeepAlive(rd)
	if perID > 10 {
		t.Fatalf("%.1f bytes kept per ID; want about 8", perID)
	}
	t.Logf("%.2f bytes kept per ID", perID)
}
