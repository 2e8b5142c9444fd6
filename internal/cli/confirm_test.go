package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/keyfleet/keyfleet/internal/exitcode"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
	"github.com/keyfleet/keyfleet/internal/testutil/redistest"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// terminal is a pseudo-terminal: tty is what a command gets as its
// standard input; answer types a line at its keyboard.
type terminal struct {
	tty, ptmx *os.File
}

func newTerminal(t *testing.T) *terminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	// What the terminal echoes is read and dropped, so that it never
	// fills up.
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, ptmx); close(done) }()
	t.Cleanup(func() { _ = tty.Close(); _ = ptmx.Close(); <-done })
	return &terminal{tty: tty, ptmx: ptmx}
}

func (term *terminal) answer(t *testing.T, line string) {
	t.Helper()
	if _, err := term.ptmx.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

// confirm asks only with a terminal on standard input and without --yes;
// "y" or "yes" goes on, anything else (an empty line, "n", the end of the
// input) is exit 1 saying that nothing was done and how to skip the
// question.
func TestConfirmAsksOnlyOnATerminal(t *testing.T) {
	question := func() string { return "Really \x1b[31mdo it?" }
	for _, c := range []struct {
		answer string
		ok     bool
	}{{"y\n", true}, {"YES\n", true}, {" yes \n", true}, {"n\n", false}, {"\n", false}, {"sure\n", false}, {"\x04", false}} {
		term := newTerminal(t)
		var errb bytes.Buffer
		p := &producer{stdin: term.tty, stdout: io.Discard, stderr: &errb}
		term.answer(t, c.answer)
		err := p.confirm(false, question, "nothing changed")
		if c.ok != (err == nil) {
			t.Errorf("answer %q: want ok %v, got %v", c.answer, c.ok, err)
		}
		if !c.ok && (exitcode.Of(err) != exitcode.Failed || !strings.Contains(err.Error(), "not confirmed: nothing changed (--yes skips the question)")) {
			t.Errorf("answer %q: want exit 1 saying nothing changed, got %d %v", c.answer, exitcode.Of(err), err)
		}
		if got := errb.String(); !strings.HasPrefix(got, `Really \x1b[31mdo it? [y/N] `) {
			t.Errorf("answer %q: the question (escaped) on stderr: %q", c.answer, got)
		}
	}
	term := newTerminal(t)
	asked := false
	p := &producer{stdin: term.tty, stdout: io.Discard, stderr: io.Discard}
	if err := p.confirm(true, func() string { asked = true; return "?" }, ""); err != nil || asked {
		t.Errorf("--yes on a terminal: want no question, got asked %v, %v", asked, err)
	}
	p.stdin = strings.NewReader("n\n")
	if err := p.confirm(false, func() string { asked = true; return "?" }, ""); err != nil || asked {
		t.Errorf("no terminal: want no question, got asked %v, %v", asked, err)
	}
}

// The commands that change the whole fleet at once ask on a terminal and
// do nothing when the answer is no; --yes or no terminal act at once; the
// same commands limited to one batch or item do not ask.
func TestFleetWideCommandsAsk(t *testing.T) {
	srv := natstest.Start(t)
	rs := redistest.Start(t)
	dir := t.TempDir()
	pool := redistest.UniqueName(t)
	cfg := filepath.Join(dir, "kf.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("nats: {url: %q}\nredis: {url: %q}\npool: {name: %s}\nqueue: {stream: CONFIRM}\nlog: {level: warn}\n",
		srv.URL(), rs.URL(), pool)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, q := testQueue(t, srv.URL(), "CONFIRM", queue.Attach)
	run := func(stdin io.Reader, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := ProducerMain(append(args, "--config", cfg), stdin, &out, &errb)
		return code, out.String(), errb.String()
	}
	deadLetters := func(batch string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := q.AddToBatch(ctx, batch, "sleep", 1); err != nil {
				t.Fatal(err)
			}
			if err := q.PutDeadLetter(ctx, kftype.DeadLetter{DeadLetterSummary: kftype.DeadLetterSummary{Item: id, Batch: batch, Kind: "sleep",
				Reason: kftype.ReasonPermanent, Attempts: 1, FailedAt: time.Now().UTC()}, Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func() int {
		t.Helper()
		n := 0
		if err := q.ListDeadLetters(ctx, "", func(kftype.DeadLetter) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadLetters("b1", "x", "y")
	deadLetters("b2", "z")

	// dlq replay of every batch: asked; no leaves them.
	term := newTerminal(t)
	term.answer(t, "n\n")
	code, out, errb := run(term.tty, "dlq", "replay")
	if code != exitcode.Failed || !strings.Contains(errb, "Replay all 3 dead letters of 2 batches, with fresh attempts? [y/N]") ||
		!strings.Contains(errb, "not confirmed: nothing replayed") || out != "" || count() != 3 {
		t.Fatalf("dlq replay answered no: want exit 1, the question, 3 records left; got %d, %d left\nstdout:\n%s\nstderr:\n%s", code, count(), out, errb)
	}
	// One batch's, or named items: no question.
	if code, out, errb := run(term.tty, "dlq", "replay", "--batch", "b2", "--json"); code != 0 || errb != "" || count() != 2 {
		t.Fatalf("dlq replay --batch on a terminal: want no question; got %d\n%s\n%s", code, out, errb)
	} else {
		var r struct {
			Replayed int                 `json:"replayed"`
			Batch    *string             `json:"batch"`
			Items    []map[string]string `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Replayed != 1 || r.Batch == nil || *r.Batch != "b2" ||
			len(r.Items) != 1 || r.Items[0]["item"] != "z" {
			t.Fatalf("dlq replay --json: %v\n%s", err, out)
		}
	}
	term.answer(t, "y\n")
	if code, out, errb := run(term.tty, "dlq", "replay"); code != 0 || !strings.Contains(errb, "[y/N]") ||
		!strings.Contains(out, "Replayed 2 dead letters (all batches)") || count() != 0 {
		t.Fatalf("dlq replay answered yes: %d\n%s\n%s", code, out, errb)
	}
	deadLetters("b3", "w")
	if code, out, errb := run(strings.NewReader("n\n"), "dlq", "replay"); code != 0 || errb != "" || count() != 0 {
		t.Fatalf("dlq replay without a terminal: want it replayed at once; got %d\n%s\n%s", code, out, errb)
	}

	// batch cancel.
	if _, err := q.Publish(ctx, kftype.Item{ID: "a", Batch: "steer", Kind: "sleep", Payload: []byte(`{"id":"a"}`)},
		kftype.Item{ID: "b", Batch: "steer", Kind: "sleep", Payload: []byte(`{"id":"b"}`)}); err != nil {
		t.Fatal(err)
	}
	state := func() kftype.BatchState {
		rec, err := q.Batch(ctx, "steer")
		if err != nil {
			t.Fatal(err)
		}
		return rec.State
	}
	term.answer(t, "no\n")
	if code, out, errb := run(term.tty, "batch", "cancel", "steer"); code != exitcode.Failed || state() != kftype.BatchRunning ||
		!strings.Contains(errb, "Cancel batch steer (2 of its 2 items not done yet)? ") || !strings.Contains(errb, "batch steer is not cancelled") {
		t.Fatalf("batch cancel answered no: want exit 1 and the batch running; got %d, %s\n%s\n%s", code, state(), out, errb)
	}
	if code, out, errb := run(term.tty, "batch", "cancel", "--yes", "--json", "steer"); code != 0 || strings.Contains(errb, "[y/N]") ||
		state() != kftype.BatchCancelled {
		t.Fatalf("batch cancel --yes on a terminal: want no question and the batch cancelled; got %d, %s\n%s\n%s", code, state(), out, errb)
	} else {
		var b struct {
			ID, State, Action string
			Drained, Out      *int
			Cancelled         int
		}
		if err := json.Unmarshal([]byte(out), &b); err != nil || b.ID != "steer" || b.State != "cancelled" || b.Action != "cancel" ||
			b.Drained == nil || *b.Drained != 2 || b.Out == nil || b.Cancelled != 2 {
			t.Fatalf("batch cancel --json: %v\n%s", err, out)
		}
	}
	// A cancel that does not apply is refused before any question.
	if code, _, errb := run(term.tty, "batch", "cancel", "steer"); code != exitcode.Usage || strings.Contains(errb, "[y/N]") {
		t.Fatalf("cancelling a cancelled batch on a terminal: want exit 2 and no question; got %d\n%s", code, errb)
	}

	// creds remove.
	p, err := creds.New(rs.Client(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := p.Register(context.Background(), []creds.Credential{{ID: "key-a", MaxConcurrent: 1}, {ID: "key-b", MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	ids := func() string {
		st, err := p.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range st.Credentials {
			out = append(out, c.ID)
		}
		return strings.Join(out, ",")
	}
	term.answer(t, "\n")
	if code, out, errb := run(term.tty, "creds", "remove", "key-a"); code != exitcode.Failed || ids() != "key-a,key-b" ||
		!strings.Contains(errb, "Remove credential key-a from pool "+pool) {
		t.Fatalf("creds remove answered with Enter: want exit 1 and key-a kept; got %d, %s\n%s\n%s", code, ids(), out, errb)
	}
	if code, _, errb := run(term.tty, "creds", "remove", "key-zz"); code != exitcode.Usage || strings.Contains(errb, "[y/N]") {
		t.Fatalf("removing an unknown key on a terminal: want exit 2 and no question; got %d\n%s", code, errb)
	}
	term.answer(t, "y\n")
	if code, out, errb := run(term.tty, "creds", "remove", "key-a", "--json"); code != 0 || ids() != "key-b" {
		t.Fatalf("creds remove answered yes: %d, %s\n%s\n%s", code, ids(), out, errb)
	} else if !strings.Contains(out, `"action": "remove"`) || !strings.Contains(out, `"id": "key-a"`) {
		t.Fatalf("creds remove --json: %s", out)
	}
	if code, out, errb := run(nil, "creds", "remove", "key-b"); code != 0 || ids() != "" || errb != "" {
		t.Fatalf("creds remove without a terminal: want key-b removed at once; got %d, %s\n%s\n%s", code, ids(), out, errb)
	}
}
