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
)

// One bad item, reply or header must not take out the pool (issue 24's
// measurement, which stopped the fleet: 11 of 301 good items done after
// 60 s). Five keys, one of them revoked; beside the good items, an item a
// content rule refuses on every key (403), one too large for the key's
// limit (OpenAI's 429 "Request too large"), and one whose 429s ask for a
// rest of 99,999,999 s. Every good item succeeds; the refused item is
// dead-lettered after at most 3 requests without disabling a key; the
// revoked key is disabled after at most 3 of its requests; the too-large
// item fails at its first request; no key rests longer than
// pool.max_rest.
func TestKeySafety(t *testing.T) {
	keys := make([]fakeapi.Key, 5)
	env := make([]string, 5)
	var credYAML strings.Builder
	for i := range keys {
		keys[i] = fakeapi.Key{Secret: fmt.Sprintf("sk-safety-%d-%s", i, strings.Repeat("x", 12))}
		env[i] = fmt.Sprintf("KEY_%d=%s", i, keys[i].Secret)
		fmt.Fprintf(&credYAML, "- {id: key-%d, secret_env: KEY_%d, max_concurrent: 2}\n", i, i)
	}
	api, err := fakeapi.New(fakeapi.Config{Keys: keys, Latency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Revoke("key-4", true); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	const maxRest = 2 * time.Second
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: credYAML.String(),
		Pool:        fmt.Sprintf("max_rest: %s", maxRest),
		Worker:      "concurrency: 3\nmax_attempts: 2\nmax_rate_limited: 3\nretry_backoff: [100ms]\nshutdown_grace: 5s",
		Jobs:        fmt.Sprintf("http:\n  url: %s/v1/do\n  timeout: 10s", srv.URL),
		Env:         env,
	})
	good := e2etest.ShortOrFull(80, 300)
	f.Publish("good", "http", good, func(id string) string { return fmt.Sprintf(`{"id":%q}`, id) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := f.Queue.Publish(ctx,
		kftype.Item{ID: "poison", Batch: "bad", Kind: "http", Payload: []byte(`{"refuse":true}`)},
		kftype.Item{ID: "huge", Batch: "bad", Kind: "http", Payload: []byte(`{"too_large":true}`)},
		kftype.Item{ID: "absurd", Batch: "bad", Kind: "http", Payload: []byte(`{"retry_after":"99999999"}`)},
	); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w1, w2 := f.StartWorker("w1"), f.StartWorker("w2")
	res := f.WaitResults("good", good, 3*time.Minute)
	took := time.Since(start)
	bad := f.WaitResults("bad", 3, time.Minute)
	lost := 0
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded {
			lost++
			t.Errorf("good item %s: %+v", id, r)
		}
	}

	dead := map[string]kftype.DeadLetter{}
	if err := f.Queue.ListDeadLetters(ctx, "bad", func(d kftype.DeadLetter) error { dead[d.Item] = d; return nil }); err != nil {
		t.Fatal(err)
	}
	st := api.Stats()
	pool := f.Pool()
	pst, err := pool.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]creds.CredentialStats{}
	for _, c := range pst.Credentials {
		byID[c.ID] = c
	}

	// The refused item: the item's fault.
	poison := dead["poison"]
	var healthyRefused int64
	for _, k := range st.Keys[:4] {
		healthyRefused += k.Refused
	}
	disabledHealthy := 0
	for i := range 4 {
		if byID[fmt.Sprintf("key-%d", i)].State == creds.StateDisabled {
			disabledHealthy++
		}
	}
	poisonOK := poison.Reason == kftype.ReasonRefused && bad["poison"].Outcome == kftype.OutcomeFailed &&
		healthyRefused <= 3 && disabledHealthy == 0
	if !poisonOK || !strings.Contains(poison.Error, "403") {
		t.Errorf("poison item: want dead-lettered (%q) after <= 3 refusals naming them, no healthy key disabled; "+
			"got dead letter %+v, %d refusals by healthy keys, %d healthy keys disabled", kftype.ReasonRefused, poison, healthyRefused, disabledHealthy)
	}
	e2etest.RecordRow(e2etest.ReliabilityRow{Scenario: "Key safety: an item refused (403) on every key", Items: good + 1, Lost: lost, Took: took,
		Passed: poisonOK && lost == 0,
		Note:   fmt.Sprintf("dead-lettered after %d requests (bound 3); healthy keys disabled: %d (bound 0)", healthyRefused, disabledHealthy)})

	// The revoked key: evidence about the key.
	revoked := byID["key-4"]
	revokedReqs := st.Keys[4].Requests
	revokedOK := revoked.State == creds.StateDisabled && revoked.DisabledBy == creds.DisabledByAPI && revokedReqs <= 3 &&
		strings.Contains(revoked.DisabledReason, "refused 3 different items in a row")
	if !revokedOK {
		t.Errorf("revoked key: want disabled by the API after <= 3 requests, with the streak as reason; got %d requests, %+v", revokedReqs, revoked)
	}
	e2etest.RecordRow(e2etest.ReliabilityRow{Scenario: "Key safety: a revoked key (401 on every request)", Items: good, Lost: lost, Took: took,
		Passed: revokedOK && lost == 0, Note: fmt.Sprintf("disabled after %d requests (bound 3)", revokedReqs)})

	// The too-large item: its own permanent failure, at its first run on
	// a key that took the request (a run on the revoked key, refused,
	// may come before it).
	huge := dead["huge"]
	hugeOK := huge.Reason == kftype.ReasonPermanent && huge.Failures == 1 && huge.Attempts <= 2 &&
		strings.Contains(huge.Error, "larger than the key's limit")
	if !hugeOK {
		t.Errorf("too-large item: want a permanent failure at its first run a key took, got %+v", huge)
	}
	e2etest.RecordRow(e2etest.ReliabilityRow{Scenario: "Key safety: an item too large for the key (429 Request too large)", Items: 1, Took: took,
		Passed: hugeOK, Note: fmt.Sprintf("dead-lettered as %q after %d run that reached the API's limit (bound 1; %d runs in all, a refusal by the revoked key counted)",
			huge.Reason, huge.Failures, huge.Attempts)})

	// The absurd Retry-After: cut to max_rest, and the item gives up after
	// max_rate_limited 429s in a row.
	absurd := dead["absurd"]
	longest := time.Duration(0)
	for _, c := range pst.Credentials {
		if !c.CoolingUntil.IsZero() {
			longest = max(longest, time.Until(c.CoolingUntil))
		}
	}
	absurdOK := absurd.Reason == kftype.ReasonRateLimited && longest <= maxRest &&
		strings.Contains(f.Logs(), "longer than pool.max_rest")
	if !absurdOK {
		t.Errorf("absurd Retry-After: want the item dead-lettered (%q), every rest <= %s, a warning in the log; got %+v, longest rest %s",
			kftype.ReasonRateLimited, maxRest, absurd, longest)
	}
	// Every key it rested comes back within max_rest.
	back := time.Now()
	testutil.WaitFor(t, "every healthy key usable again", maxRest+5*time.Second, func() bool {
		s, err := pool.Stats(ctx)
		if err != nil {
			return false
		}
		for _, c := range s.Credentials {
			if c.ID != "key-4" && c.State == creds.StateCooling {
				return false
			}
		}
		return true
	})
	e2etest.RecordRow(e2etest.ReliabilityRow{Scenario: "Key safety: a 429 with Retry-After 99,999,999 s", Items: 1, Took: took,
		Passed: absurdOK, Note: fmt.Sprintf("rests cut to max_rest %s (longest left %s); every key usable %s later; item dead-lettered after max_rate_limited 429s",
			maxRest, longest.Round(time.Millisecond), time.Since(back).Round(100*time.Millisecond))})

	if st.OverLimit() != 0 {
		t.Errorf("the API admitted requests over a key's limits: %+v", st)
	}
	for _, k := range keys {
		if strings.Contains(f.Logs(), k.Secret) {
			t.Errorf("a secret reached the logs")
		}
	}
	for _, w := range []*e2etest.Process{w1, w2} {
		w.Signal(syscall.SIGTERM)
		w.WaitExit(t, 20*time.Second)
	}
	t.Logf("%d good items in %s; poison refused %d times; revoked key asked %d times; dead letters %v", good, took, healthyRefused, revokedReqs, dead)
}
