package jobs_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// testHandler is a persistent handler in Python. Each process appends its
// PID to $PH_DIR/starts and, when its stdin ends, to $PH_DIR/eof; it
// prints $PH_BANNER, when set, on stdout at start. The item's "mode" says
// what to do with it.
const testHandler = `import hashlib, json, os, sys, time

d = os.environ["PH_DIR"]
with open(os.path.join(d, "starts"), "a") as f:
    f.write("%d\n" % os.getpid())
if os.environ.get("PH_BANNER"):
    sys.stdout.write(os.environ["PH_BANNER"] + "\n")
    sys.stdout.flush()

def answer(a):
    a.setdefault("id", req["id"])
    sys.stdout.write(json.dumps(a) + "\n")
    sys.stdout.flush()

prev = ""
for line in sys.stdin:
    if "req" in globals():
        prev = req["id"]
    req = json.loads(line)
    item = req["item"]
    mode = item.get("mode", "ok")
    if mode == "ok":
        answer({"status": "ok", "output": {"id": req["id"], "pid": os.getpid(), "attempt": req["attempt"],
                                           "batch": req["batch"], "credential_id": req["credential_id"], "item": item}})
    elif mode == "answer":
        # @ID@ is the item line's id, as JSON
        for l in (item.get("before") or []) + [item["line"]] + (item.get("after") or []):
            sys.stdout.write(l.replace("@ID@", json.dumps(req["id"])) + "\n")
        sys.stdout.flush()
    elif mode == "script":
        # FuzzPersistentAnswers: ops in order, "prev" being the item before
        mine = req["id"]
        for op in item["ops"]:
            if op in ("own", "dup"):
                for _ in range(2 if op == "dup" else 1):
                    answer({"id": mine, "status": "ok", "output": {"for": mine}})
            elif op in ("prev", "reject"):
                answer({"id": prev, "status": "ok" if op == "prev" else "rejected", "output": {"for": prev}})
            elif op == "other":
                answer({"id": "never-sent", "status": "ok", "output": {"for": "never-sent"}})
            elif op == "banner":
                sys.stdout.write("handler ready\n")
                sys.stdout.flush()
            elif op == "partial":
                sys.stdout.write('{"id": "%s", "sta' % mine)
                sys.stdout.flush()
                sys.exit(1)
            elif op == "exit":
                sys.exit(1)
    elif mode == "answer_exit":
        answer({"status": "ok", "output": {"id": req["id"], "pid": os.getpid()}})
        sys.exit(0)
    elif mode == "exit":
        print("Traceback: something broke", file=sys.stderr, flush=True)
        sys.exit(3)
    elif mode == "hang":
        time.sleep(300)
    elif mode == "drip":
        # a line that is not an answer every "every" seconds, never an answer
        while True:
            sys.stdout.write("still working\n")
            sys.stdout.flush()
            time.sleep(item["every"])
    elif mode == "big":
        answer({"status": "ok", "output": "x" * item["n"]})
    elif mode == "secret":
        env = dict(os.environ)
        answer({"status": "ok", "output": {
            "sha256": hashlib.sha256(req["secret"].encode()).hexdigest(),
            "secret_in_env": any(req["secret"] in v for v in env.values()),
            "env": sorted(k for k in env if k.startswith("KEYFLEET_") or k.startswith("PH_") or k.startswith("TEST_")),
            "kind": env.get("KEYFLEET_KIND"),
            "echo": req["secret"]}})
    elif mode == "stderr":
        for i in range(item.get("lines", 1)):
            print("%s %d key=%s" % (item.get("text", "line"), i, req["secret"]), file=sys.stderr)
        sys.stderr.flush()
        answer({"status": "ok"})
with open(os.path.join(d, "eof"), "a") as f:
    f.write("%d\n" % os.getpid())
`

// withID puts the item line's id (@ID@, which testHandler replaces) first
// in a JSON object's text.
func withID(line string) string { return `{"id":@ID@,` + strings.TrimPrefix(line, "{") }

// persistentRig is a persistent handler running testHandler, with what
// it noted.
type persistentRig struct {
	t   *testing.T
	dir string
	h   jobs.Handler

	mu    sync.Mutex
	notes []jobs.HandlerNote
}

func newPersistentRig(t *testing.T, edit func(*jobs.ExecConfig)) *persistentRig {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("persistent handler tests need python3: %v", err)
	}
	r := &persistentRig{t: t, dir: t.TempDir()}
	path := filepath.Join(r.dir, "handler.py")
	if err := os.WriteFile(path, []byte(testHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := jobs.ExecConfig{
		Command:    []string{python, path},
		Persistent: true,
		Timeout:    20 * time.Second,
		Env:        map[string]string{"PH_DIR": r.dir},
		Scrubber:   secret.NewScrubber(testCred.Secret),
		Notes: func(n jobs.HandlerNote) {
			r.mu.Lock()
			r.notes = append(r.notes, n)
			r.mu.Unlock()
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := jobs.NewExec(cfg)
	r.h = built(t, jobs.KindExec, h, err)
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
		for _, pid := range r.pids("starts") {
			waitDead(t, pid)
		}
	})
	return r
}

func (r *persistentRig) close() error { return r.h.(interface{ Close() error }).Close() }

// run runs an item whose JSON is payload.
func (r *persistentRig) run(ctx context.Context, id, payload string) (jobs.Output, error) {
	it := jobs.Item{ID: id, Batch: "b", Kind: jobs.KindExec, Attempt: 1, Payload: []byte(payload)}
	return r.h.Run(ctx, it, testCred)
}

// ok runs an "ok" item and returns the PID of the process that served it.
func (r *persistentRig) ok(id string) int {
	r.t.Helper()
	out, err := r.run(r.t.Context(), id, `{"mode":"ok"}`)
	if err != nil {
		r.t.Fatalf("item %s: %v", id, err)
	}
	var o struct {
		ID  string `json:"id"`
		PID int    `json:"pid"`
	}
	if err := json.Unmarshal(out.Body, &o); err != nil || o.ID != id {
		r.t.Fatalf("item %s: output %q (%v)", id, out.Body, err)
	}
	return o.PID
}

// pids reads a file of PIDs, one a line.
func (r *persistentRig) pids(name string) []int {
	b, _ := os.ReadFile(filepath.Join(r.dir, name))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (r *persistentRig) notesOf(cause string) []jobs.HandlerNote {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []jobs.HandlerNote
	for _, n := range r.notes {
		if n.Cause == cause {
			out = append(out, n)
		}
	}
	return out
}

func TestPersistentOneProcessPerSlot(t *testing.T) {
	r := newPersistentRig(t, nil)
	const slots, perSlot = 3, 40
	var mu sync.Mutex
	served := map[int]int{}
	var wg sync.WaitGroup
	for s := range slots {
		wg.Go(func() {
			for i := range perSlot {
				id := fmt.Sprintf("s%d-%d", s, i)
				out, err := r.run(t.Context(), id, `{"mode":"ok","n":`+strconv.Itoa(i)+`}`)
				if err != nil {
					t.Errorf("item %s: %v", id, err)
					return
				}
				var o struct {
					ID      string         `json:"id"`
					PID     int            `json:"pid"`
					Attempt int            `json:"attempt"`
					Batch   string         `json:"batch"`
					Cred    string         `json:"credential_id"`
					Item    map[string]any `json:"item"`
				}
				if err := json.Unmarshal(out.Body, &o); err != nil || o.ID != id || o.Attempt != 1 || o.Batch != "b" ||
					o.Cred != testCred.ID || o.Item["n"] != float64(i) {
					t.Errorf("item %s: output %s (%v)", id, out.Body, err)
					return
				}
				mu.Lock()
				served[o.PID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	starts := r.pids("starts")
	if len(starts) < 1 || len(starts) > slots {
		t.Fatalf("%d handler processes started for %d slots: %v", len(starts), slots, starts)
	}
	total := 0
	for pid, n := range served {
		if !slices.Contains(starts, pid) {
			t.Errorf("items served by %d, not a started handler %v", pid, starts)
		}
		total += n
	}
	if total != slots*perSlot {
		t.Errorf("%d items served, want %d", total, slots*perSlot)
	}
	if n := len(r.notesOf(jobs.NoteStarted)); n != 1 {
		t.Errorf("%d start notes, want 1 (the first; the others within the minute are held back)", n)
	}
	t.Logf("%d items on %d slots: %d handler processes %v", total, slots, len(starts), served)
}

// A handler whose answers are given by the test: each status maps to the
// outcome exec's exit statuses have, and one process serves them all.
func TestPersistentStatuses(t *testing.T) {
	r := newPersistentRig(t, nil)
	future := time.Now().Add(time.Hour).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT")
	tests := []struct {
		name  string
		line  string
		want  jobs.Outcome
		check func(t *testing.T, out jobs.Output, err error)
	}{
		{"ok output as JSON text", `{"status":"ok","output":{"answer": [1, 2, "three"]},"cost":41.2}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				if string(out.Body) != `{"answer": [1, 2, "three"]}` || out.Cost != 42 || out.Rest != 0 {
					t.Errorf("output %q cost %d rest %s", out.Body, out.Cost, out.Rest)
				}
			}},
		{"ok string output", `{"status":"ok","output":"plain"}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				if string(out.Body) != `"plain"` {
					t.Errorf("output %q", out.Body)
				}
			}},
		{"ok without output", `{"status":"ok"}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				if len(out.Body) != 0 || out.Cost != 0 || out.CostNote != "" {
					t.Errorf("%+v", out)
				}
			}},
		{"ok with retry_after rests the key", `{"status":"ok","output":1,"retry_after":30}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				if out.Rest != 30*time.Second || out.RestFrom != "handler retry_after" {
					t.Errorf("rest %s from %q", out.Rest, out.RestFrom)
				}
			}},
		{"ok with an unreadable cost", `{"status":"ok","cost":"lots"}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				if out.Cost != 0 || !strings.Contains(out.CostNote, "unreadable cost") {
					t.Errorf("cost %d note %q", out.Cost, out.CostNote)
				}
			}},
		{"rate limited with seconds", `{"status":"rate_limited","retry_after":1.5,"error":"slow down","cost":7}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 1500*time.Millisecond || rl.Source != "handler retry_after" ||
					!strings.Contains(rl.Detail, "slow down") || out.Cost != 7 {
					t.Errorf("%#v cost %d", err, out.Cost)
				}
			}},
		{"rate limited with an HTTP-date", `{"status":"rate_limited","retry_after":"` + future + `"}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter < 59*time.Minute || rl.RetryAfter > time.Hour {
					t.Errorf("%v", err)
				}
			}},
		{"bare rate limit", `{"status":"rate_limited"}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 0 || rl.Source != "" {
					t.Errorf("%#v", err)
				}
			}},
		{"rate limited, unreadable retry_after", `{"status":"rate_limited","retry_after":-4}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 0 || !strings.Contains(rl.Detail, "unreadable retry_after -4") {
					t.Errorf("%#v", err)
				}
			}},
		{"rejected with a reason", `{"status":"rejected","error":"Incorrect API key provided: ` + testSecret + `"}`, jobs.OutcomeRejected,
			func(t *testing.T, out jobs.Output, err error) {
				var rj *jobs.RejectedError
				if !errors.As(err, &rj) || !strings.HasPrefix(rj.Reason, "Incorrect API key provided") ||
					!strings.Contains(rj.Reason, secret.Redacted) {
					t.Errorf("%#v", err)
				}
			}},
		{"rejected, no reason", `{"status":"rejected"}`, jobs.OutcomeRejected,
			func(t *testing.T, out jobs.Output, err error) {
				var rj *jobs.RejectedError
				if !errors.As(err, &rj) || rj.Reason != "status rejected" {
					t.Errorf("%#v", err)
				}
			}},
		{"permanent", `{"status":"permanent","error":"no field text","output":{"partial":true}}`, jobs.OutcomePermanent,
			func(t *testing.T, out jobs.Output, err error) {
				if !strings.Contains(err.Error(), "no field text") || string(out.Body) != `{"partial":true}` {
					t.Errorf("%v, output %q", err, out.Body)
				}
			}},
		{"transient", `{"status":"transient","error":{"code":502}}`, jobs.OutcomeTransient,
			func(t *testing.T, out jobs.Output, err error) {
				if !strings.Contains(err.Error(), `status transient: {"code":502}`) {
					t.Errorf("%v", err)
				}
			}},
		{"unknown fields are ignored", `{"status":"ok","output":2,"extra":{"a":1}}`, jobs.OutcomeOK, nil},
		{"ok with the API's rate-limit headers", `{"status":"ok","headers":{"x-ratelimit-remaining-requests":"0","x-ratelimit-reset-requests":"1.5s","x-ratelimit-remaining-tokens":120,"x-ratelimit-reset-tokens":"6m0s","x-other":null}}`, jobs.OutcomeOK,
			func(t *testing.T, out jobs.Output, err error) {
				want := []jobs.Signal{
					{Name: "x-ratelimit-remaining-requests", Remaining: 0, Reset: 1500 * time.Millisecond},
					{Name: "x-ratelimit-remaining-tokens", Tokens: true, Remaining: 120, Reset: 6 * time.Minute},
				}
				if !slices.Equal(out.Signals, want) {
					t.Errorf("signals %+v, want %+v", out.Signals, want)
				}
			}},
		{"rate limited, the rest from its headers", `{"status":"rate_limited","headers":{"retry-after-ms":"250","anthropic-ratelimit-requests-remaining":"0","anthropic-ratelimit-requests-reset":"` + time.Now().Add(time.Minute).UTC().Format(time.RFC3339) + `"}}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 250*time.Millisecond || rl.Source != "handler headers: retry-after-ms header" ||
					len(rl.Signals) != 1 || rl.Signals[0].Name != "anthropic-ratelimit-requests-remaining" {
					t.Errorf("%#v", err)
				}
			}},
		{"rate limited, retry_after over its headers", `{"status":"rate_limited","retry_after":3,"headers":{"retry-after":"1"}}`, jobs.OutcomeRateLimited,
			func(t *testing.T, out jobs.Output, err error) {
				var rl *jobs.RateLimitedError
				if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second || rl.Source != "handler retry_after" {
					t.Errorf("%#v", err)
				}
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, _ := json.Marshal(map[string]string{"mode": "answer", "line": withID(tt.line)})
			out, err := r.run(t.Context(), fmt.Sprintf("s-%d", i), string(payload))
			if got := jobs.Classify(err); got != tt.want {
				t.Fatalf("outcome %v (err %v), want %v", got, err, tt.want)
			}
			noSecret(t, err)
			if tt.check != nil {
				tt.check(t, out, err)
			}
		})
	}
	if starts := r.pids("starts"); len(starts) != 1 {
		t.Errorf("handler processes %v: one should have served every answer", starts)
	}
	if n := r.notesOf(jobs.NoteAnswer); len(n) != 0 {
		t.Errorf("valid answers noted as bad: %+v", n)
	}
}

// An answer is taken only for the item whose id it echoes: a handler that
// answers another item (a late answer, a second answer to the item
// before) keeps its process in step, and what it said of the other item
// reaches no item.
func TestPersistentAnswersMatchTheirItems(t *testing.T) {
	r := newPersistentRig(t, nil)
	first := r.ok("warm")
	line := func(mode string, fields map[string]any) string {
		fields["mode"] = mode
		b, _ := json.Marshal(fields)
		return string(b)
	}
	// A stray answer before its own: passed over.
	out, err := r.run(t.Context(), "a", line("answer", map[string]any{
		"before": []string{`{"id":"zz","status":"rejected","error":"stale verdict"}`},
		"line":   `{"id":@ID@,"status":"ok","output":"for-a"}`,
	}))
	if err != nil || string(out.Body) != `"for-a"` {
		t.Fatalf("item a: %v, output %q; want its own answer", err, out.Body)
	}
	// Two answers to b: the second is read while c waits, and ignored.
	out, err = r.run(t.Context(), "b", line("answer", map[string]any{
		"line":  `{"id":@ID@,"status":"ok","output":"for-b"}`,
		"after": []string{`{"id":@ID@,"status":"rejected","output":"for-b, again"}`},
	}))
	if err != nil || string(out.Body) != `"for-b"` {
		t.Fatalf("item b: %v, output %q", err, out.Body)
	}
	out, err = r.run(t.Context(), "c", line("answer", map[string]any{"line": `{"id":@ID@,"status":"ok","output":"for-c"}`}))
	if err != nil || string(out.Body) != `"for-c"` {
		t.Fatalf("item c got %q (%v): another item's answer or a failure", out.Body, err)
	}
	if starts := r.pids("starts"); len(starts) != 1 || starts[0] != first {
		t.Errorf("handler starts %v: one process should have served every item", starts)
	}
	if n := r.notesOf(jobs.NoteStray); len(n) != 1 || !strings.Contains(n[0].Text, `answered for item "zz" while item "a" waited`) {
		t.Errorf("stray notes %+v: want the first noted (the second within the minute is counted)", n)
	}

	// A process that answers only other items is out of step: it fails
	// the item once it wrote more such answers than the bound.
	var strays []string
	for i := range jobs.MaxSkippedLines + 1 {
		strays = append(strays, fmt.Sprintf(`{"id":"other-%d","status":"ok"}`, i))
	}
	_, err = r.run(t.Context(), "d", line("answer", map[string]any{"before": strays[:jobs.MaxSkippedLines], "line": strays[jobs.MaxSkippedLines]}))
	if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "lines that are not this item's answer") {
		t.Fatalf("item d: %v, want a transient failure", err)
	}
}

// A line that is not the waiting item's answer is skipped and noted, and
// the item's own answer is read on: the process keeps serving, nothing
// fails. Every kind of such line, one item each, through one process; the
// item after each gets its own answer too.
func TestPersistentSkipsLinesNotForItsItem(t *testing.T) {
	r := newPersistentRig(t, nil)
	first := r.ok("warm")
	upToTheBound := make([]string, jobs.MaxSkippedLines)
	for i := range upToTheBound {
		upToTheBound[i] = []string{"debug", "", `{"status":"ok"}`, `{"id":"zz","status":"ok"}`}[i%4]
	}
	tests := []struct {
		name   string
		before []string // written before the item's answer
		after  []string // written after it
	}{
		{"a line that is not JSON", []string{"hello, debugging"}, nil},
		{"a blank line", []string{""}, nil},
		{"JSON without an id", []string{`{"status":"ok","output":"no id"}`}, nil},
		{"JSON that is not an object", []string{`["ready"]`}, nil},
		{"an id that is not a string", []string{`{"id":7,"status":"ok"}`}, nil},
		{"another item's id, not an answer", []string{`{"id":"zz","status":"done"}`}, nil},
		{"an answer for another item", []string{`{"id":"zz","status":"rejected","error":"stale verdict"}`}, nil},
		{"a second answer", nil, []string{`{"id":@ID@,"status":"rejected","output":"again"}`}},
		{"a line after the answer", nil, []string{"done."}},
		{"as many lines as the bound", upToTheBound, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("skip-%d", i)
			payload, _ := json.Marshal(map[string]any{"mode": "answer", "before": tt.before, "after": tt.after,
				"line": `{"id":@ID@,"status":"ok","output":"for-` + id + `"}`})
			out, err := r.run(t.Context(), id, string(payload))
			if err != nil || string(out.Body) != `"for-`+id+`"` {
				t.Fatalf("item %s: %v, output %q; want its own answer", id, err, out.Body)
			}
			if pid := r.ok(id + "-next"); pid != first {
				t.Fatalf("the item after %s was served by %d, want %d (no restart)", id, pid, first)
			}
		})
	}
	if starts := r.pids("starts"); len(starts) != 1 {
		t.Errorf("handler starts %v: one process should have served every item", starts)
	}
	if n := r.notesOf(jobs.NoteAnswer); len(n) != 0 {
		t.Errorf("a skipped line failed an item: %+v", n)
	}
	skipped := r.notesOf(jobs.NoteSkipped)
	if len(skipped) != 1 || !strings.Contains(skipped[0].Text, `wrote "hello, debugging" while item "skip-0" waited, not an answer (not a JSON object): skipped`) {
		t.Errorf("skipped notes %+v: want the first (the others within the minute are counted)", skipped)
	}
}

// A library that prints a banner on stdout at start costs no item: the
// banner is skipped and noted (scrubbed, its control characters quoted),
// and each item gets its own answer. A restarted process prints it again,
// and it is skipped again.
func TestPersistentBannerAtStart(t *testing.T) {
	banner := "\x1b[1mLoading model\x1b[0m key=" + testSecret + "\nready"
	r := newPersistentRig(t, func(c *jobs.ExecConfig) { c.Env["PH_BANNER"] = banner })
	first := r.ok("one")
	for i := range 5 {
		if pid := r.ok(fmt.Sprintf("more-%d", i)); pid != first {
			t.Fatalf("item more-%d served by %d, want %d", i, pid, first)
		}
	}
	if err := syscallKill(first); err != nil {
		t.Fatal(err)
	}
	waitDead(t, first)
	if pid := r.ok("after-restart"); pid == first {
		t.Fatal("served by the killed handler")
	}
	if n := r.notesOf(jobs.NoteAnswer); len(n) != 0 {
		t.Errorf("the banner failed an item: %+v", n)
	}
	notes := r.notesOf(jobs.NoteSkipped)
	want := `wrote "\x1b[1mLoading model\x1b[0m key=` + secret.Redacted + `" while item "one" waited`
	if len(notes) != 1 || notes[0].PID != first || !strings.Contains(notes[0].Text, want) {
		t.Fatalf("skipped notes %+v, want one for the banner's first line, with %s", notes, want)
	}
	if strings.Contains(notes[0].Text, testSecret) || strings.ContainsFunc(notes[0].Text, unicode.IsControl) {
		t.Errorf("the note holds the secret or a control character: %q", notes[0].Text)
	}
}

// A handler that exits right after an answer costs the next item nothing:
// that item never reached it, so it runs on a new process at once, with no
// failure (before, it failed as transient and used up an attempt).
func TestPersistentExitAfterAnswer(t *testing.T) {
	r := newPersistentRig(t, nil)
	for i := range 5 {
		id := fmt.Sprintf("one-shot-%d", i)
		out, err := r.run(t.Context(), id, `{"mode":"answer_exit"}`)
		if err != nil {
			t.Fatalf("item %s after a handler that exited after its answer: %v", id, err)
		}
		if !strings.Contains(string(out.Body), id) {
			t.Fatalf("item %s: output %q", id, out.Body)
		}
	}
	if starts := r.pids("starts"); len(starts) != 5 {
		t.Errorf("handler starts %v, want one per item", starts)
	}
}

// tooManyLines is an item whose handler writes one line more than
// jobs.MaxSkippedLines that are not its answer, then its answer.
func tooManyLines() string {
	lines := make([]string, jobs.MaxSkippedLines+1)
	for i := range lines {
		lines[i] = fmt.Sprintf("debug line %d", i)
	}
	b, _ := json.Marshal(map[string]any{"mode": "answer", "before": lines, "line": withID(`{"status":"ok"}`)})
	return string(b)
}

// A handler that exits, answers its item with something else, writes more
// lines that are not its answer than the bound, hangs past the timeout or
// writes an answer line over the bound fails its item as transient; it is killed, and a new one serves the next item. Each cause
// is noted once, however often it happens within the minute.
func TestPersistentBrokenHandlers(t *testing.T) {
	// The rows that wait for the timeout set a short one (5 s: a Python
	// process starting on a loaded machine must not pass it); the others
	// keep the rig's 20 s, so that only their own cause can end their
	// runs, which the error's text shows.
	const short = 5 * time.Second
	tests := []struct {
		name     string
		payload  string
		timeout  time.Duration // 0: the rig's
		cause    string
		contains string
	}{
		{"exits", `{"mode":"exit"}`, 0, jobs.NoteExit, "exited (exit status 3); stderr: Traceback: something broke"},
		{"unknown status", `{"mode":"answer","line":"{\"id\":@ID@,\"status\":\"done\"}"}`, 0, jobs.NoteAnswer, `unknown status "done"`},
		{"no status", `{"mode":"answer","line":"{\"id\":@ID@,\"output\":1}"}`, 0, jobs.NoteAnswer, `no "status"`},
		{"more lines than the bound that are not its answer", tooManyLines(), 0, jobs.NoteAnswer,
			fmt.Sprintf(`more than %d lines that are not this item's answer`, jobs.MaxSkippedLines)},
		{"hangs past the timeout", `{"mode":"hang"}`, short, jobs.NoteTimeout, "timed out after 5s"},
		// At most 11 lines in 5 s, below the bound: the timeout ends it,
		// skipped lines never extend it.
		{"writes lines that are not its answer until the timeout", `{"mode":"drip","every":0.5}`, short, jobs.NoteTimeout, "timed out after 5s"},
		{"writes a line over max_output", `{"mode":"big","n":5000}`, 0, jobs.NoteOversize, "over jobs.max_output (4096 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newPersistentRig(t, func(c *jobs.ExecConfig) {
				c.Timeout, c.MaxOutput = cmp.Or(tt.timeout, c.Timeout), 4096
			})
			first := r.ok("before")
			// Twice: the cause is noted once.
			for i := range 2 {
				out, err := r.run(t.Context(), fmt.Sprintf("bad-%d", i), tt.payload)
				if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), tt.contains) {
					t.Fatalf("run %d: %v (output %q), want a transient failure containing %q", i, err, out.Body, tt.contains)
				}
				noSecret(t, err)
			}
			waitDead(t, first)
			next := r.ok("after")
			starts := r.pids("starts")
			if next == first || len(starts) != 3 || starts[0] != first || starts[2] != next {
				t.Errorf("served by %d before and %d after; starts %v (want 3: one per failure)", first, next, starts)
			}
			notes := r.notesOf(tt.cause)
			if len(notes) != 1 || notes[0].PID != first || strings.Contains(notes[0].Text, testSecret) {
				t.Errorf("notes of %s: %+v, want one, of pid %d", tt.cause, notes, first)
			}
		})
	}

	t.Run("a line just within max_output is served", func(t *testing.T) {
		r := newPersistentRig(t, func(c *jobs.ExecConfig) { c.MaxOutput = 4096 })
		// {"status": "ok", "output": "x…", "id": "fits"} is 44 bytes
		// besides the x's.
		out, err := r.run(t.Context(), "fits", `{"mode":"big","n":4052}`)
		if err != nil || len(out.Body) != 4054 || out.Truncated {
			t.Fatalf("%v: %d bytes", err, len(out.Body))
		}
		if _, err := r.run(t.Context(), "over", `{"mode":"big","n":4053}`); jobs.Classify(err) != jobs.OutcomeTransient {
			t.Fatalf("one byte more: %v", err)
		}
	})

	t.Run("exits while idle", func(t *testing.T) {
		r := newPersistentRig(t, nil)
		pid := r.ok("one")
		if err := syscallKill(pid); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the killed handler to be reaped", 10*time.Second, func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			return errors.Is(err, os.ErrNotExist)
		})
		// The dead process is found when the next item takes it: the item
		// runs on a new one.
		if next := r.ok("two"); next == pid {
			t.Fatal("served by the dead handler")
		}
		if n := r.notesOf(jobs.NoteExit); len(n) != 1 || !strings.Contains(n[0].Text, "while idle") {
			t.Errorf("exit notes %+v", n)
		}
	})

	t.Run("a command that cannot start", func(t *testing.T) {
		dir := t.TempDir()
		r := newPersistentRig(t, func(c *jobs.ExecConfig) { c.Dir = dir })
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			_, err := r.run(t.Context(), "x", `{"mode":"ok"}`)
			if jobs.Classify(err) != jobs.OutcomeTransient || !strings.Contains(err.Error(), "start the persistent handler") {
				t.Fatalf("run %d: %v, want a transient failure to start", i, err)
			}
		}
		if n := r.notesOf(jobs.NoteStart); len(n) != 1 || !strings.Contains(n[0].Text, "no such file or directory") {
			t.Errorf("start notes %+v, want one", n)
		}
	})
}

func syscallKill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// The secret travels in the item line only: not in the handler's
// environment, where no secret_env variable of the worker's reaches
// either; the output that echoes it is scrubbed.
func TestPersistentSecretOnlyInItemLine(t *testing.T) {
	t.Setenv("TEST_KEY_A", testSecret)
	t.Setenv("TEST_KEPT", "1")
	t.Setenv("KEYFLEET_ITEM_ID", "inherited")
	r := newPersistentRig(t, func(c *jobs.ExecConfig) { c.ScrubEnv = []string{"TEST_KEY_A"} })
	out, err := r.run(t.Context(), "s", `{"mode":"secret"}`)
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		SHA256      string   `json:"sha256"`
		SecretInEnv bool     `json:"secret_in_env"`
		Env         []string `json:"env"`
		Kind        string   `json:"kind"`
		Echo        string   `json:"echo"`
	}
	if err := json.Unmarshal(out.Body, &o); err != nil {
		t.Fatalf("%v: %q", err, out.Body)
	}
	sum := sha256.Sum256([]byte(testSecret))
	if o.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("the item line's secret is not the credential's")
	}
	if o.SecretInEnv {
		t.Errorf("the secret is in the handler's environment")
	}
	if want := []string{"KEYFLEET_KIND", "PH_DIR", "TEST_KEPT"}; !slices.Equal(o.Env, want) || o.Kind != "exec" {
		t.Errorf("environment %v (KEYFLEET_KIND %q), want %v", o.Env, o.Kind, want)
	}
	if o.Echo != secret.Redacted || strings.Contains(string(out.Body), testSecret) {
		t.Errorf("the output is not scrubbed: %q", out.Body)
	}
}

// stderr reaches the notes line by line, scrubbed and rate-limited, and
// no line is lost: each is either logged or counted in the Dropped of the
// next line logged. How many get through in a given time is the noter's
// (TestNoterStderrRate, on a stubbed clock): on a loaded machine the flood
// takes longer to read, and lines let through in that time are right.
func TestPersistentStderr(t *testing.T) {
	start := time.Now()
	r := newPersistentRig(t, nil)
	if _, err := r.run(t.Context(), "a", `{"mode":"stderr","text":"hello"}`); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the stderr line", 10*time.Second, func() bool { return len(r.notesOf(jobs.NoteStderr)) == 1 })
	n := r.notesOf(jobs.NoteStderr)[0]
	if n.Text != "hello 0 key="+secret.Redacted || n.PID != r.pids("starts")[0] {
		t.Errorf("note %+v", n)
	}

	// A flood, then a numbered line at a time until one gets through:
	// every line up to it is logged or counted, exactly once.
	const flood = 2000
	if _, err := r.run(t.Context(), "b", fmt.Sprintf(`{"mode":"stderr","text":"flood","lines":%d}`, flood)); err != nil {
		t.Fatal(err)
	}
	afters := 0
	var lastAfter int // the number of the last "after-N" line logged
	testutil.WaitFor(t, "a line after the flood", time.Minute, func() bool {
		afters++
		if _, err := r.run(t.Context(), "c", fmt.Sprintf(`{"mode":"stderr","text":"after-%d"}`, afters)); err != nil {
			t.Fatal(err)
		}
		ns := r.notesOf(jobs.NoteStderr)
		_, err := fmt.Sscanf(ns[len(ns)-1].Text, "after-%d ", &lastAfter)
		return err == nil
	})
	notes := r.notesOf(jobs.NoteStderr)
	accounted := 0
	for _, n := range notes {
		accounted += 1 + n.Dropped
		if strings.Contains(n.Text, testSecret) {
			t.Fatalf("a stderr note holds the secret: %q", n.Text)
		}
	}
	written := 1 + flood + lastAfter // hello, the flood, the afters up to the last logged
	if accounted != written {
		t.Errorf("the notes account for %d stderr lines (logged plus held back), want the %d written up to the last one logged", accounted, written)
	}
	// The rate limit (a burst of 100, then 20 a second, from the rig's
	// start): a bound that a slow machine only loosens.
	if limit := 100 + 20*time.Since(start).Seconds(); float64(len(notes)) > limit {
		t.Errorf("%d stderr lines logged in %s, over the limit %.0f", len(notes), time.Since(start), limit)
	}
	t.Logf("%d of %d stderr lines logged in %s, %d held back (the last note says %d)",
		len(notes), written, time.Since(start).Round(time.Millisecond), written-len(notes), notes[len(notes)-1].Dropped)
}

// A run cancelled while the handler works (worker shutdown, lost lease)
// returns at once, wrapping the cause, and the handler is killed: its
// answer would come too late.
func TestPersistentCancel(t *testing.T) {
	r := newPersistentRig(t, nil)
	pid := r.ok("warm")
	ctx, cancel := context.WithCancelCause(t.Context())
	errLost := errors.New("lease lost")
	time.AfterFunc(200*time.Millisecond, func() { cancel(errLost) })
	start := time.Now()
	_, err := r.run(ctx, "long", `{"mode":"hang"}`)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errLost) || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %s, want the cancellation at once", err, time.Since(start))
	}
	waitDead(t, pid)
	if next := r.ok("next"); next == pid {
		t.Fatal("the cancelled handler served the next item")
	}
}

// Close ends every handler: an idle one gets the end of its stdin (and
// exits by itself), a busy one is killed; runs after Close fail.
func TestPersistentClose(t *testing.T) {
	r := newPersistentRig(t, nil)
	busy := make(chan error, 1)
	go func() {
		_, err := r.run(t.Context(), "long", `{"mode":"hang"}`)
		busy <- err
	}()
	testutil.WaitFor(t, "a handler for the long item", 10*time.Second, func() bool { return len(r.pids("starts")) == 1 })
	idle := r.ok("warm")
	if len(r.pids("starts")) != 2 {
		t.Fatalf("handlers %v, want 2 (a busy and an idle one)", r.pids("starts"))
	}
	start := time.Now()
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %s", took)
	}
	for _, pid := range r.pids("starts") {
		if alive(pid) {
			t.Errorf("handler %d runs after Close", pid)
		}
	}
	if eof := r.pids("eof"); !slices.Equal(eof, []int{idle}) {
		t.Errorf("handlers that saw their stdin end: %v, want the idle one %d", eof, idle)
	}
	if err := testutil.Receive(t, busy, 10*time.Second, "the busy run did not end"); jobs.Classify(err) != jobs.OutcomeTransient {
		t.Errorf("the busy run: %v", err)
	}
	if _, err := r.run(t.Context(), "late", `{"mode":"ok"}`); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a run after Close: %v", err)
	}
	if len(r.pids("starts")) != 2 {
		t.Errorf("a run after Close started a handler: %v", r.pids("starts"))
	}
	if err := r.close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// With persistent jobs, a probe_command still runs as a process per
// probe, its exit status the answer.
func TestPersistentProbe(t *testing.T) {
	c := jobs.ExecConfig{Command: []string{"cat"}, Persistent: true, Timeout: time.Minute,
		ProbeCommand: []string{script(t, `[ "$KEYFLEET_CREDENTIAL_SECRET" = "`+testSecret+`" ]`)}}
	p, err := c.NewProber(jobs.Common{}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cause, err := p.Probe(t.Context(), testCred); err != nil || cause != "probe_command exited 0" {
		t.Fatalf("probe: %q %v", cause, err)
	}
}
