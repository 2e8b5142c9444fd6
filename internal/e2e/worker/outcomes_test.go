package worker

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// outcomeScript behaves by item ID: ok-* succeeds, perm-* exits 65,
// trans-* exits 1, rl-* is rate limited (exit 75, Retry-After 1) on its
// first three runs, rej-* is refused (exit 77) on key-a.
const outcomeScript = `D="{{dir}}"
id="$KEYFLEET_ITEM_ID"
echo "$id $KEYFLEET_ATTEMPT $KEYFLEET_CREDENTIAL_ID" >> "$D/runs"
cat > /dev/null
case "$id" in
  ok-*) printf 'ok %s' "$id"; exit 0 ;;
  perm-*) echo "bad input in $id" >&2; exit 65 ;;
  trans-*) echo "flaky upstream" >&2; exit 1 ;;
  rl-*)
    n=$(cat "$D/rl-$id" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$D/rl-$id"
    if [ $n -le 3 ]; then echo "Retry-After: 1" >&2; exit 75; fi
    printf 'ok %s' "$id"; exit 0 ;;
  rej-*)
    if [ "$KEYFLEET_CREDENTIAL_ID" = "key-a" ]; then echo "invalid api key" >&2; exit 77; fi
    printf 'ok %s' "$id"; exit 0 ;;
esac
exit 3
`

// Each exit code settles as its outcome: a permanent failure runs once and
// is dead-lettered; a transient one runs max_attempts times, then is
// dead-lettered; rate limits and a refused key use up no attempt.
func TestExecOutcomesSettle(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A}
- {id: key-b, secret_env: KEY_B}`,
		Worker: "concurrency: 1\nmax_attempts: 2\nretry_backoff: [100ms]\nshutdown_grace: 5s",
		Jobs:   "exec:\n  command: [\"{{dir}}/outcome.sh\"]",
		Env:    []string{"KEY_A=secret-a-123", "KEY_B=secret-b-456"},
	})
	f.WriteScript("outcome.sh", strings.ReplaceAll(outcomeScript, "{{dir}}", f.Dir))
	ids := []string{"rej-0", "ok-1", "perm-2", "trans-3", "rl-4", "ok-5"}
	items := make([]kftype.Item, len(ids))
	for i, id := range ids {
		items[i] = kftype.Item{ID: id, Batch: "b", Kind: "exec", Payload: []byte(`{"id":"` + id + `"}`)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.Queue.Publish(ctx, items...); err != nil {
		t.Fatal(err)
	}
	w := f.StartWorker("w1")
	res := f.WaitResults("b", len(ids), 2*time.Minute)

	want := map[string]struct {
		outcome  string
		attempts int
		cred     string
	}{
		"rej-0":   {kftype.OutcomeSucceeded, 2, "key-b"},
		"ok-1":    {kftype.OutcomeSucceeded, 1, ""},
		"perm-2":  {kftype.OutcomeFailed, 1, ""},
		"trans-3": {kftype.OutcomeFailed, 2, ""},
		"rl-4":    {kftype.OutcomeSucceeded, 4, ""},
		"ok-5":    {kftype.OutcomeSucceeded, 1, ""},
	}
	for id, wnt := range want {
		r := res[id]
		if r.Outcome != wnt.outcome || r.Attempts != wnt.attempts || (wnt.cred != "" && r.CredentialID != wnt.cred) {
			t.Errorf("%s: want %s after %d runs (credential %q), got %+v", id, wnt.outcome, wnt.attempts, wnt.cred, r)
		}
		if r.Outcome == kftype.OutcomeSucceeded && r.Output != "ok "+id {
			t.Errorf("%s output %q", id, r.Output)
		}
	}
	runs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(f.File("runs")), "\n") {
		parts := strings.Fields(line)
		runs[parts[0]] = append(runs[parts[0]], parts[1])
	}
	if got := strings.Join(runs["rl-4"], ","); got != "1,2,3,4" {
		t.Errorf("KEYFLEET_ATTEMPT of rl-4's runs: %s, want 1,2,3,4", got)
	}
	if len(runs["perm-2"]) != 1 || len(runs["trans-3"]) != 2 {
		t.Errorf("runs: perm-2 %v (want 1), trans-3 %v (want 2)", runs["perm-2"], runs["trans-3"])
	}

	dead := map[string]kftype.DeadLetter{}
	if err := f.Queue.ListDeadLetters(ctx, "b", func(d kftype.DeadLetter) error { dead[d.Item] = d; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead["perm-2"].Reason != kftype.ReasonPermanent || dead["trans-3"].Reason != kftype.ReasonOutOfAttempts {
		t.Fatalf("dead letters: %+v", dead)
	}
	if !strings.Contains(dead["perm-2"].Error, "bad input in perm-2") || string(dead["perm-2"].Payload) != `{"id":"perm-2"}` {
		t.Fatalf("dead letter of perm-2: %+v", dead["perm-2"])
	}

	pool := f.Pool()
	st, err := pool.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Credentials {
		// One item refused by key-a is evidence, not a verdict: key-a stays
		// in use (three different items refused in a row would disable it).
		if c.ID == "key-a" && c.State == creds.StateDisabled {
			t.Fatalf("key-a after one item's exit 77: %+v", c)
		}
	}
	// A result is written before its message is acked: the last acks may
	// still be on their way.
	testutil.WaitFor(t, "the stream to be empty with 2 dead letters", 10*time.Second, func() bool {
		qs := f.QueueStats()
		return qs.Stream.Messages == 0 && qs.DeadLetters == 2
	})
	w.Signal(syscall.SIGTERM)
	if code := w.WaitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if logs := f.Logs(); strings.Contains(logs, "secret-a-123") || strings.Contains(logs, "secret-b-456") {
		t.Fatal("a secret reached the logs")
	}
}

// http jobs against a stand-in API that enforces per-key limits: 429s
// (Retry-After) cool keys down and the items run on, using up no attempt
// even with max_attempts 1; a wrong key (401) is disabled; 404 is
// permanent; 500 is transient.
func TestHTTPOutcomesAgainstRateLimitedAPI(t *testing.T) {
	api, err := fakeapi.New(fakeapi.Config{
		Keys: []fakeapi.Key{
			{Secret: "sk-live-aaaa", Rate: ratelimit.Limit{N: 4, Period: time.Second}, Concurrency: 1},
			{Secret: "sk-live-bbbb", Rate: ratelimit.Limit{N: 4, Period: time.Second}, Concurrency: 1},
		},
		Latency: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		// Pool limits looser than the API's: the API answers 429.
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 2}
- {id: key-b, secret_env: KEY_B, max_concurrent: 2}
- {id: key-wrong, secret_env: KEY_WRONG}`,
		Pool:   "cooldown: 5s",
		Worker: "concurrency: 4\nmax_attempts: 1\nshutdown_grace: 5s",
		Jobs:   fmt.Sprintf("http:\n  url: %s/v1/do\n  timeout: 10s", srv.URL),
		Env:    []string{"KEY_A=sk-live-aaaa", "KEY_B=sk-live-bbbb", "KEY_WRONG=sk-live-nope"},
	})
	const n = 30
	f.Publish("ok", "http", n, func(id string) string { return fmt.Sprintf(`{"id":%q,"q":"hello"}`, id) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := f.Queue.Publish(ctx,
		kftype.Item{ID: "nf", Batch: "bad", Kind: "http", Payload: []byte(`{"force_status":404}`)},
		kftype.Item{ID: "boom", Batch: "bad", Kind: "http", Payload: []byte(`{"force_status":500}`)},
	); err != nil {
		t.Fatal(err)
	}
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	res := f.WaitResults("ok", n, 3*time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded || r.CredentialID == "key-wrong" || !strings.Contains(r.Output, `"ok":true`) {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	bad := f.WaitResults("bad", 2, time.Minute)
	if r := bad["nf"]; r.Outcome != kftype.OutcomeFailed || !strings.HasPrefix(r.Error, kftype.ReasonPermanent) || r.Attempts < 1 {
		t.Fatalf("404: %+v", r)
	}
	// One failed run (rate-limited runs before it, if any, use no attempt).
	if r := bad["boom"]; r.Outcome != kftype.OutcomeFailed || !strings.HasPrefix(r.Error, kftype.ReasonOutOfAttempts) || r.Attempts < 1 {
		t.Fatalf("500: %+v", r)
	}
	st := api.Stats()
	var limited int64
	for _, k := range st.Keys {
		limited += k.RateLimited
	}
	if st.OverLimit() != 0 {
		t.Fatalf("the API admitted requests over a key's limits: %+v", st)
	}
	if limited == 0 || st.Unauthorized == 0 {
		t.Fatalf("want some 429s and a 401 (the test must exercise them): %+v", st)
	}
	pst, err := f.Pool().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pst.Credentials {
		if c.ID == "key-wrong" && (c.State != creds.StateDisabled || !strings.Contains(c.DisabledReason, "401")) {
			t.Fatalf("key-wrong: %+v", c)
		}
	}
	for _, w := range []*e2etest.Process{w1, w2} {
		w.Signal(syscall.SIGTERM)
		w.WaitExit(t, 20*time.Second)
	}
	t.Logf("%d http items: all succeeded with max_attempts 1 through %d 429s; 401 disabled the wrong key", n, limited)
}

// A job longer than the lease TTL and the ack wait completes once: its
// lease is renewed and its message kept alive.
func TestLongJobOutlivesLeaseAndAckWait(t *testing.T) {
	f := e2etest.GuardedFleetPool(t, "lease_ttl: 1s", "concurrency: 1\nshutdown_grace: 5s", "ack_wait: 1s", "SLEEP=3.5")
	f.Publish("b", "exec", 2, e2etest.ItemJSON)
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	res := f.WaitResults("b", 2, 2*time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded || r.Attempts != 1 || r.Duration < 3.5 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	f.AssertRanOnceSafely()
	for _, w := range []*e2etest.Process{w1, w2} {
		w.Signal(syscall.SIGTERM)
		w.WaitExit(t, 20*time.Second)
	}
}
