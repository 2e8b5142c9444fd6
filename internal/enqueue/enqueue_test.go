package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// open starts a NATS server and opens a queue on it.
func open(t *testing.T, opts ...nats.Option) (*queue.Queue, *natstest.Server) {
	t.Helper()
	srv := natstest.Start(t)
	q, err := queue.Open(ctx(t), natstest.Connect(t, srv.URL(), opts...), queue.Config{Stream: "ENQ"})
	if err != nil {
		t.Fatal(err)
	}
	return q, srv
}

// messages is the number of messages in the work stream.
func messages(t *testing.T, q *queue.Queue) uint64 {
	t.Helper()
	s, err := q.JetStream().Stream(ctx(t), q.Config().Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(n int, format string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, format+"\n", i)
	}
	return b.String()
}

// A file is enqueued, counted and recorded with its priority and weight;
// the same file again adds nothing; a later enqueue without priority and
// weight keeps them, one with them replaces them.
func TestRunFile(t *testing.T) {
	q, _ := open(t)
	path := writeFile(t, "my items.jsonl", lines(50, `{"id":"i-%d","ms":0}`))
	req := enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "sleep", Priority: 1, Weight: 7}
	rep, err := enqueue.Run(ctx(t), q, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.Batch, "my-items-") || len(rep.Batch) != len("my-items-")+8 {
		t.Errorf("default batch: want my-items-<8 hex digits>, got %q", rep.Batch)
	}
	if rep.Items != 50 || rep.Lines != 50 || rep.New != 50 || rep.Duplicates != 0 || rep.Priority != 1 || rep.Weight != 7 || rep.RecordErr != nil {
		t.Fatalf("want 50 new items at priority 1, weight 7; got %+v", rep)
	}
	if !rep.IDs.Has(rep.IDs.Key("i-49")) || rep.IDs.Has(rep.IDs.Key("i-50")) {
		t.Error("the report's IDs are the input's")
	}
	if n := messages(t, q); n != 50 {
		t.Fatalf("want 50 messages, got %d", n)
	}

	req.Priority, req.Weight = 0, 0
	again, err := enqueue.Run(ctx(t), q, req)
	if err != nil || again.Batch != rep.Batch || again.New != 0 || again.Duplicates != 50 || again.Priority != 1 || again.Weight != 7 {
		t.Fatalf("again: want 50 duplicates in the same batch, priority and weight kept; got %+v %v", again, err)
	}
	rec, err := q.Batch(ctx(t), rep.Batch)
	if err != nil || rec.Total != 50 || rec.Priority != 1 || rec.Weight != 7 || rec.Kinds.String() != "sleep" {
		t.Fatalf("record: want 50 sleep items, priority 1, weight 7; got %+v %v", rec, err)
	}

	req.Priority = 5
	if rep, err := enqueue.Run(ctx(t), q, req); err != nil || rep.Priority != 5 || rep.Weight != 7 {
		t.Fatalf("a given priority replaces the batch's: %+v %v", rep, err)
	}
	if rec, _ := q.Batch(ctx(t), rep.Batch); rec.Priority != 5 || rec.Total != 50 {
		t.Fatalf("record after the new priority: %+v", rec)
	}
}

// A stream is copied to a temporary file for its later readings (which
// is removed at the end); its default batch is named after Source.Name.
func TestRunReader(t *testing.T) {
	q, _ := open(t)
	tmp := t.TempDir()
	body := lines(10, `{"key":"k%d"}`) + `{"key":"k3"}` + "\n" // a repeat: the third reading finds it
	_, err := enqueue.Run(ctx(t), q, enqueue.Request{
		Source: enqueue.Source{Name: "request body", Reader: strings.NewReader(body)}, Kind: "sleep", IDField: "key", TempDir: tmp,
	})
	var ie *enqueue.InputError
	if !errors.As(err, &ie) || ie.Count != 1 || ie.Problems[0].Line != 11 || ie.Problems[0].FirstLine != 4 {
		t.Fatalf("want line 11 a duplicate of line 4, got %v", err)
	}
	body = lines(10, `{"key":"k%d"}`)
	rep, err := enqueue.Run(ctx(t), q, enqueue.Request{
		Source: enqueue.Source{Name: "request body", Reader: strings.NewReader(body)}, Kind: "sleep", IDField: "key", TempDir: tmp,
	})
	if err != nil || rep.New != 10 || !strings.HasPrefix(rep.Batch, "request-body-") {
		t.Fatalf("want 10 new items in request-body-<hash>, got %+v %v", rep, err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

// Any bad line: nothing is published; the error lists the first bad lines
// in line order (duplicates, found last, among them) and counts them all.
func TestBadInputPublishesNothing(t *testing.T) {
	q, _ := open(t)
	in := `{"id":"a"}` + "\n" + `{"id":"b","cost":-1}` + "\n" + `{"id":"a"}` + "\n" + `not json` + "\n" +
		lines(30, `{"x":%d}`) + `{"id":"b"}` + "\n"
	_, err := enqueue.Run(ctx(t), q, enqueue.Request{
		Source: enqueue.Source{Name: "in", Path: writeFile(t, "in.jsonl", in)}, Kind: "sleep", CostField: "cost", CostDefault: 1, MaxProblems: 4,
	})
	var ie *enqueue.InputError
	if !errors.As(err, &ie) || !errors.Is(err, enqueue.ErrInput) {
		t.Fatalf("want an InputError, got %v", err)
	}
	var got []string
	for _, le := range ie.Problems {
		got = append(got, le.Error())
	}
	want := []string{
		`line 2: item "b": bad cost: field "cost" is -1, want a number from 0 to 4611686018427387903`,
		`line 3: item "a": duplicate ID (first on line 1)`,
		`line 4: malformed JSON: invalid character 'o' in literal null (expecting 'u') (column 2)`,
		`line 5: no ID: no field "id"`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || ie.Count != 33 || ie.Lines != 35 {
		t.Fatalf("want 33 bad lines of 35, the first\n%q\ngot %d of %d:\n%q", want, ie.Count, ie.Lines, got)
	}
	if !strings.Contains(err.Error(), "in: 33 bad lines in 35 lines: nothing was enqueued (line 2:") {
		t.Errorf("message: %v", err)
	}
	if n := messages(t, q); n != 0 {
		t.Fatalf("a bad input published %d messages", n)
	}
	if _, err := q.Batch(ctx(t), "x"); !errors.Is(err, queue.ErrNoBatch) {
		t.Fatal(err)
	}
}

// The request's own mistakes are RequestErrors naming the field; nothing
// is read.
func TestRequestChecks(t *testing.T) {
	src := enqueue.Source{Reader: errReader{}}
	for _, tc := range []struct {
		req   enqueue.Request
		field string
	}{
		{enqueue.Request{Source: src, Kind: "nope"}, "kind"},
		{enqueue.Request{Source: src, Kind: "sleep", Batch: "a\nb"}, "batch"},
		{enqueue.Request{Source: src, Kind: "sleep", Priority: 6}, "priority"},
		{enqueue.Request{Source: src, Kind: "sleep", Priority: -1}, "priority"},
		{enqueue.Request{Source: src, Kind: "sleep", Weight: 1001}, "weight"},
		{enqueue.Request{Kind: "sleep"}, "source"},
	} {
		_, err := enqueue.Run(ctx(t), nil, tc.req)
		var re *enqueue.RequestError
		if !errors.As(err, &re) || re.Field != tc.field || !errors.Is(err, enqueue.ErrInvalid) {
			t.Errorf("%+v: want a RequestError on %s, got %v", tc.req, tc.field, err)
		}
	}
	if err := enqueue.CheckPriority(0); err == nil || !strings.Contains(err.Error(), "priority: 0: want 1 (first) to 5 (last)") {
		t.Errorf("CheckPriority(0): %v", err)
	}
	if enqueue.CheckPriority(5) != nil || enqueue.CheckWeight(1000) != nil || enqueue.CheckWeight(0) == nil {
		t.Error("CheckPriority(5), CheckWeight(1000) pass; CheckWeight(0) fails")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

// A dry run needs no queue: it lists the IDs in order and checks sizes
// against MaxPayload.
func TestDryRun(t *testing.T) {
	path := writeFile(t, "d.jsonl", `{"id":"z"}`+"\n\n"+`{"id":"a"}`+"\n")
	var ids []string
	var checked enqueue.Report
	rep, err := enqueue.Run(ctx(t), nil, enqueue.Request{
		Source: enqueue.Source{Path: path}, Kind: "exec", DryRun: true,
		Checked: func(r enqueue.Report) { checked = r },
		List:    func(id string) error { ids = append(ids, id); return nil },
	})
	if err != nil || fmt.Sprint(ids) != "[z a]" || rep.Items != 2 || rep.Lines != 3 || checked.Batch != rep.Batch || rep.New != 0 {
		t.Fatalf("want z, a listed of 3 lines; got %v %+v %v", ids, rep, err)
	}
	big := writeFile(t, "big.jsonl", `{"id":"a","p":"`+strings.Repeat("x", 600)+`"}`+"\n")
	_, err = enqueue.Run(ctx(t), nil, enqueue.Request{Source: enqueue.Source{Path: big}, Kind: "exec", DryRun: true, MaxPayload: 512})
	var ie *enqueue.InputError
	if !errors.As(err, &ie) || !errors.Is(ie.Problems[0], jsonl.ErrTooLong) || !strings.Contains(err.Error(), "nothing would be enqueued") {
		t.Fatalf("want item a too large for 512 bytes, got %v", err)
	}
}

// Two enqueues of the same input at once add each item once: the
// server's deduplication decides, and the new items of both add up to the
// input, in the reports and in the batch's record.
func TestConcurrentSameInput(t *testing.T) {
	q, _ := open(t)
	const n = 3000
	body := lines(n, `{"id":"c-%d"}`)
	var wg sync.WaitGroup
	reps := make([]enqueue.Report, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = enqueue.Run(ctx(t), q, enqueue.Request{
				Source: enqueue.Source{Name: "body", Reader: strings.NewReader(body)}, Kind: "sleep", Batch: "same", Window: 64,
			})
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || reps[i].New+reps[i].Duplicates != n {
			t.Fatalf("run %d: %+v %v", i, reps[i], errs[i])
		}
	}
	if reps[0].New+reps[1].New != n {
		t.Fatalf("new items: %d + %d, want %d in all", reps[0].New, reps[1].New, n)
	}
	if rec, err := q.Batch(ctx(t), "same"); err != nil || rec.Total != n {
		t.Fatalf("record: want %d, got %+v %v", n, rec, err)
	}
	if m := messages(t, q); m != n {
		t.Fatalf("want %d messages, got %d", n, m)
	}
}

// The server gone (and the connection closed): the record cannot be read
// before publishing, an ErrUnreachable, and nothing is published.
func TestServerGone(t *testing.T) {
	q, srv := open(t, nats.NoReconnect())
	srv.Shutdown()
	_, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Path: writeFile(t, "a.jsonl", `{"id":"a"}`)}, Kind: "sleep"})
	if !errors.Is(err, enqueue.ErrUnreachable) {
		t.Fatalf("want ErrUnreachable, got %v", err)
	}
}

// The context ends while publishing: a PublishError says what was
// confirmed, and is an ErrInterrupted.
func TestInterruptedWhilePublishing(t *testing.T) {
	q, _ := open(t)
	c, cancel := context.WithCancel(ctx(t))
	const n = 20_000
	rep, err := enqueue.Run(c, q, enqueue.Request{
		Source: enqueue.Source{Path: writeFile(t, "i.jsonl", lines(n, `{"id":"i-%d"}`))}, Kind: "sleep", Window: 16,
		Progress: func(p enqueue.Progress) {
			if p.Phase == enqueue.Publishing {
				cancel()
			}
		},
		ProgressEvery: time.Nanosecond,
	})
	var pe *enqueue.PublishError
	if !errors.As(err, &pe) || !pe.Interrupted || !errors.Is(err, enqueue.ErrInterrupted) {
		t.Fatalf("want an interrupted PublishError, got %v", err)
	}
	got := messages(t, q)
	if rep.NotSent == 0 || uint64(rep.New) != got || rep.New+rep.Duplicates+rep.Unconfirmed+rep.NotSent != n {
		t.Fatalf("report %+v against %d messages stored", rep, got)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%d of %d items of batch", rep.New, n)) {
		t.Errorf("message: %v", err)
	}
}

// A body over its bound (http.MaxBytesReader) is an ErrInput through
// which the *http.MaxBytesError is visible (the API answers 413), and
// nothing is published.
func TestReaderErrorVisible(t *testing.T) {
	q, _ := open(t)
	body := io.NopCloser(strings.NewReader(lines(100, `{"id":"m-%d"}`)))
	limited := http.MaxBytesReader(httptest.NewRecorder(), body, 500)
	_, err := enqueue.Run(ctx(t), q, enqueue.Request{Source: enqueue.Source{Name: "body", Reader: limited}, Kind: "sleep"})
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) || !errors.Is(err, enqueue.ErrInput) || mbe.Limit != 500 {
		t.Fatalf("want an ErrInput holding the MaxBytesError, got %v", err)
	}
	if n := messages(t, q); n != 0 {
		t.Fatalf("published %d", n)
	}
}

func TestBatchName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"items", "items"}, {"My Items.v2", "My-Items.v2"}, {"", "items"}, {"..", "items"}, {"é/x", "x"},
	} {
		if got := enqueue.BatchName(tc.in); got != tc.want {
			t.Errorf("%q: want %q, got %q", tc.in, tc.want, got)
		}
	}
}
