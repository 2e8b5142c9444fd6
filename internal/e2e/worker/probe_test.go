package worker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// probeCounter counts the probes (GET /v1/models) the stand-in API gets,
// by the key they carry.
type probeCounter struct {
	mu     sync.Mutex
	byAuth map[string]int
}

func (c *probeCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
			c.mu.Lock()
			c.byAuth[r.Header.Get("Authorization")]++
			c.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (c *probeCounter) of(secret string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAuth["Bearer "+secret]
}

// Keys the API disabled come back by themselves: with pool.probe_interval
// 1s and jobs.http.probe_url, two workers probe the API-disabled key about
// once a second between them (one fleet-wide claim per key and interval),
// the probe answers 401 while the key is revoked, and once the API takes
// the key again it is enabled within the interval plus a second, with the
// probe's answer as its cause, logged, and shown by producer status. A key
// an operator disabled is never probed.
func TestProbeEnablesKeyTheAPIDisabled(t *testing.T) {
	const (
		secretA  = "sk-probe-aaaa1111"
		secretB  = "sk-probe-bbbb2222"
		interval = time.Second
	)
	api, err := fakeapi.New(fakeapi.Config{Keys: []fakeapi.Key{{Secret: secretA}, {Secret: secretB}}})
	if err != nil {
		t.Fatal(err)
	}
	probes := &probeCounter{byAuth: map[string]int{}}
	srv := httptest.NewServer(probes.wrap(api))
	t.Cleanup(srv.Close)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A}
- {id: key-b, secret_env: KEY_B}`,
		Pool: "probe_interval: " + interval.String(),
		Jobs: fmt.Sprintf("http:\n  url: %s/v1/do\n  probe_url: %s/v1/models", srv.URL, srv.URL),
		Env:  []string{"KEY_A=" + secretA, "KEY_B=" + secretB},
	})
	f.StartWorker("w1")
	f.StartWorker("w2")
	pool := f.Pool()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cred := func(id string) creds.CredentialStats {
		t.Helper()
		st, err := pool.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Credentials {
			if c.ID == id {
				return c
			}
		}
		return creds.CredentialStats{}
	}
	testutil.WaitFor(t, "the workers' credentials in the pool", time.Minute, func() bool {
		return cred("key-a").ID != "" && cred("key-b").ID != ""
	})

	// key-b: an operator's decision. key-a: revoked at the API, and
	// disabled by the pool on a run's evidence (what the step's disable
	// does when the API refuses the key).
	if err := api.Revoke("key-0", true); err != nil {
		t.Fatal(err)
	}
	if err := pool.Disable(ctx, "key-b", "billing"); err != nil {
		t.Fatal(err)
	}
	l, err := pool.Acquire(ctx, "test")
	if err != nil || l.CredentialID != "key-a" {
		t.Fatalf("acquire: want key-a, got %+v, %v", l, err)
	}
	if err := pool.Settle(ctx, l, creds.Outcome{Disable: "401 Unauthorized: invalid_api_key"}); err != nil {
		t.Fatal(err)
	}
	if c := cred("key-a"); c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByAPI {
		t.Fatalf("key-a: want disabled by the API, got %+v", c)
	}

	// Probed while revoked, about once per interval between both workers.
	testutil.WaitFor(t, "a first probe of key-a", 10*time.Second, func() bool { return probes.of(secretA) >= 1 })
	start, first := time.Now(), probes.of(secretA)
	const window = 4 * time.Second
	testutil.WaitFor(t, "probes over a few intervals", 30*time.Second, func() bool { return time.Since(start) >= window })
	n := probes.of(secretA) - first
	if limit := int(window/(interval*95/100)) + 1; n < 2 || n > limit {
		t.Fatalf("key-a was probed %d times in %s by two workers with probe_interval %s: want 2 to %d (once per interval fleet-wide)",
			n, window, interval, limit)
	}
	if c := cred("key-a"); c.State != creds.StateDisabled {
		t.Fatalf("key-a enabled while the API refused it: %+v", c)
	}

	// The API takes the key again: it is back within the interval and a
	// second.
	if err := api.Revoke("key-0", false); err != nil {
		t.Fatal(err)
	}
	flipped := time.Now()
	testutil.WaitForEvery(t, "key-a enabled by a probe", 30*time.Second, 20*time.Millisecond, func() bool {
		return cred("key-a").State != creds.StateDisabled
	})
	back := time.Since(flipped)
	if back > interval+time.Second {
		t.Errorf("key-a came back %s after the API took it again; want at most %s", back.Round(time.Millisecond), interval+time.Second)
	}
	e2etest.RecordRow(e2etest.ReliabilityRow{Scenario: "Key safety: a key the API disabled recovers (probe)", Items: 0, Took: back,
		Passed: back <= interval+time.Second && probes.of(secretB) == 0,
		Note: fmt.Sprintf("back %s after the API took it again (bound probe_interval %s + 1s); operator-disabled key probed %d times (bound 0)",
			back.Round(10*time.Millisecond), interval, probes.of(secretB))})
	c := cred("key-a")
	wantCause := "probe GET " + srv.URL + "/v1/models answered 200 OK"
	if c.State != creds.StateAvailable || c.EnabledBy != creds.EnabledByProbe || c.EnabledReason != wantCause || c.EnabledAt.IsZero() {
		t.Fatalf("key-a after the probe: want available, enabled by probe with %q; got %+v", wantCause, c)
	}
	testutil.WaitFor(t, "the enable in the logs", 10*time.Second, func() bool {
		return strings.Contains(f.Logs(), "credential enabled again by a probe")
	})

	// The operator's key was never probed, and stays disabled.
	if got := probes.of(secretB); got != 0 {
		t.Errorf("key-b, disabled by an operator, was probed %d times", got)
	}
	if c := cred("key-b"); c.State != creds.StateDisabled || c.DisabledBy != creds.DisabledByOperator {
		t.Errorf("key-b: want disabled by an operator, got %+v", c)
	}

	// Shown by producer status, as text and JSON.
	r := f.Producer(nil, "status")
	if r.Code != 0 {
		t.Fatalf("status:\n%s", r)
	}
	for _, want := range []string{"enabled by probe: " + wantCause, "disabled: billing (by an operator"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.Stdout)
		}
	}
	st, _ := f.StatusJSON()
	for _, c := range st.Pool.Credentials {
		switch {
		case c.ID == "key-a" && (c.EnabledBy != "probe" || c.EnabledReason != wantCause || c.EnabledAt == nil || c.DisabledBy != ""):
			t.Errorf("status --json key-a: %+v", c)
		case c.ID == "key-b" && (c.DisabledBy != "operator" || c.EnabledBy != ""):
			t.Errorf("status --json key-b: %+v", c)
		}
	}
	for _, s := range []string{secretA, secretB} {
		if strings.Contains(f.Logs()+r.Stdout, s) {
			t.Errorf("a secret (%.10s…) reached the logs or the status", s)
		}
	}
	t.Logf("key-a probed %d times in all, key-b %d; status:\n%s", probes.of(secretA), probes.of(secretB), r.Stdout)
}
