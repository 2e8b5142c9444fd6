package gateway

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// arrivals is the order of events the test sees: the API's arrivals of
// batch and gateway requests, and the moments the application sends.
type arrivals struct {
	mu     sync.Mutex
	events []string
}

func (a *arrivals) add(e string) {
	a.mu.Lock()
	a.events = append(a.events, e)
	a.mu.Unlock()
}

// batchesBetween counts the batch requests that reached the API after
// the application sent request id and before that request reached it.
func (a *arrivals) batchesBetween(id string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, sent := 0, false
	for _, e := range a.events {
		switch {
		case e == "send "+id:
			sent = true
		case e == "api "+id:
			return n, sent
		case sent && e == "api batch":
			n++
		}
	}
	return n, false
}

// An application's requests go ahead of a batch that saturates the same
// keys (a batch of priority 1, with many of its items waiting for a key):
// each reaches the API with at most a few batch requests in between
// (those already granted when it came), where a place in the batch's line
// would put it behind every waiting item. With the keys' limits told, no
// request gets a 429 from them, and the batch runs on what is left.
func TestAheadOfSaturatingBatch(t *testing.T) {
	var seen arrivals
	limit := ratelimit.Limit{N: 10, Period: time.Second}
	f := newFleet(t, options{
		oaKeys: []fakeapi.Key{{Secret: keySecrets["key-a"], Rate: limit}, {Secret: keySecrets["key-b"], Rate: limit}},
		credentials: "- {id: key-a, secret_env: KEY_A, max_concurrent: 4, groups: [openai], limits: [{rate: 10/s, burst: 1}]}\n" +
			"- {id: key-b, secret_env: KEY_B, max_concurrent: 4, groups: [openai], limits: [{rate: 10/s, burst: 1}]}\n" +
			"- {id: key-c, secret_env: KEY_C, max_concurrent: 4, groups: [anthropic]}",
		concurrency: 40,
		onRequest: func(r fakeapi.Received) {
			body := string(r.Body)
			if i := strings.Index(body, "interactive request "); i >= 0 {
				id, _, _ := strings.Cut(body[i+len("interactive request "):], `"`)
				seen.add("api " + id)
				return
			}
			seen.add("api batch")
		},
	})
	f.startWorker("w1")
	const items = 160
	var lines strings.Builder
	for i := range items {
		fmt.Fprintf(&lines, `{"id":"b-%04d","model":"gpt-4o-mini","messages":[{"role":"user","content":"batch item %d"}],"max_tokens":4}`+"\n", i, i)
	}
	path := f.WriteInput("bulk.jsonl", lines.String())
	if r := f.Producer(nil, "enqueue", "--kind", "chat", "--batch", "bulk", "--priority", "1", path); r.Code != 0 {
		t.Fatalf("enqueue:\n%s", r)
	}
	pool := f.Pool()
	testutil.WaitFor(t, "the batch to saturate the keys (items waiting for them)", time.Minute, func() bool {
		st, err := pool.Stats(t.Context())
		return err == nil && st.Waiting >= 10
	})
	const requests = 8
	sent := 0
	for i := range requests {
		id := fmt.Sprintf("r%d", i)
		seen.add("send " + id)
		got := post(t, f.gateway+"/chat/v1/chat/completions",
			fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"interactive request %s"}],"max_tokens":4}`, id),
			"Authorization", "Bearer "+appToken)
		sent++
		if got.status != 200 {
			t.Fatalf("gateway request %s: %d %s", id, got.status, got.body)
		}
		n, ok := seen.batchesBetween(id)
		if !ok {
			t.Fatalf("request %s never reached the API", id)
		}
		t.Logf("request %s: %d batch requests reached the API between its sending and its arrival", id, n)
		if n > 4 {
			t.Fatalf("request %s reached the API after %d batch requests sent after it: it did not go ahead of the waiting batch items", id, n)
		}
		if st, err := pool.Stats(t.Context()); err == nil && st.Waiting < 5 {
			t.Logf("only %d waiters left after request %s: the batch is ending", st.Waiting, id)
			break
		}
	}
	res := f.WaitResults("bulk", items, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Fatalf("batch item %s: %s %s", id, r.Outcome, r.Error)
		}
	}
	var limited, ok int64
	for _, k := range f.oa.Stats().Keys {
		limited += k.RateLimited
		ok += k.OK
	}
	if limited != 0 {
		t.Errorf("the API refused %d requests with 429: the keys' limits were told, none should be", limited)
	}
	if ok != int64(items+sent) {
		t.Errorf("the API answered %d requests, want %d batch items and %d gateway requests", ok, items, sent)
	}
	if t.Failed() {
		t.Log(e2etest.Tail(f.Logs(), 40))
	}
}
