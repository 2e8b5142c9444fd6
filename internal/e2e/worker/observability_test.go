package worker

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// wantedMetrics are the series every metric the operator guide lists
// shows after TestWorkerServesMetricsAndHealth's run.
var wantedMetrics = []string{
	`keyfleet_items_total{kind="exec",outcome="succeeded"}`,
	`keyfleet_items_total{kind="exec",outcome="failed"}`,
	`keyfleet_items_total{kind="exec",outcome="rate_limited"}`,
	`keyfleet_items_total{kind="exec",outcome="rejected"}`,
	`keyfleet_items_total{kind="exec",outcome="retried"}`,
	`keyfleet_job_duration_seconds_bucket{kind="exec"`,
	`keyfleet_credential_wait_seconds_count`,
	`keyfleet_item_attempts_bucket{kind="exec",outcome="succeeded"`,
	`keyfleet_credential_in_flight{credential="key-b"}`,
	`keyfleet_credential_cooldowns_total{credential=`,
	`source="retry_after"`,
	`keyfleet_credential_rejections_total{cause="exit_77",credential="key-c"}`,
	`keyfleet_slots 2`,
	`keyfleet_slots_busy`,
	`keyfleet_redeliveries_total`,
	`keyfleet_lease_renew_failures_total`,
	`keyfleet_dead_letters_total{kind="exec",reason="permanent failure"}`,
	`keyfleet_dead_letters_total{kind="exec",reason="out of attempts"}`,
	`keyfleet_fetch_messages_bucket`,
	`go_goroutines`,
	`process_resident_memory_bytes`,
}

// A running worker serves /healthz, /readyz and /metrics: every metric the
// operator guide lists is there after a run with successes, failures, rate
// limits and a rejected key; labels carry no item IDs and no secrets;
// /readyz turns 503 while the worker drains.
func TestWorkerServesMetricsAndHealth(t *testing.T) {
	addr := testutil.FreeAddr(t)
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		// key-c is refused by the job whatever the item (least recently used
		// selection tries it within the first three runs).
		Credentials: `- {id: key-a, secret_env: KEY_A}
- {id: key-b, secret_env: KEY_B}
- {id: key-c, secret_env: KEY_C}`,
		Worker: fmt.Sprintf("concurrency: 2\nmax_attempts: 2\nretry_backoff: [100ms]\nshutdown_grace: 3s\nlisten: %s", addr),
		Jobs:   "exec:\n  command: [\"{{dir}}/outcome.sh\"]",
		Env:    []string{"KEY_A=" + e2etest.Secrets["key-a"], "KEY_B=" + e2etest.Secrets["key-b"], "KEY_C=sk-test-CCCC-3333-revoked"},
	})
	revoked := "[ \"$KEYFLEET_CREDENTIAL_ID\" = key-c ] && { echo \"revoked key\" >&2; exit 77; }\n"
	f.WriteScript("outcome.sh", revoked+strings.ReplaceAll(outcomeScript, "{{dir}}", f.Dir))
	ids := []string{"rej-0", "ok-1", "perm-2", "trans-3", "rl-4", "ok-5"}
	items := make([]kftype.Item, len(ids))
	for i, id := range ids {
		items[i] = kftype.Item{ID: id, Batch: "obs", Kind: "exec", Payload: []byte(`{"id":"` + id + `"}`)}
	}
	if _, err := f.Queue.Publish(t.Context(), items...); err != nil {
		t.Fatal(err)
	}
	w := f.StartWorker("obs-worker", "--log-level", "debug")
	testutil.WaitFor(t, "/readyz to answer 200", time.Minute, func() bool {
		code, _, err := e2etest.GetURL("http://" + addr + "/readyz")
		return err == nil && code == http.StatusOK
	})
	if code, body, err := e2etest.GetURL("http://" + addr + "/healthz"); err != nil || code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q %v", code, body, err)
	}
	// Profiles only when worker.pprof asks for them (it does not here).
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		if code, _, err := e2etest.GetURL("http://" + addr + path); err != nil || code != http.StatusNotFound {
			t.Errorf("%s without worker.pprof: want 404, got %d %v", path, code, err)
		}
	}
	f.WaitResults("obs", len(ids), 2*time.Minute)

	// The worker counts an item after its result is stored: the last
	// item's counts may reach /metrics a moment after its result.
	var metrics string
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := e2etest.GetURL("http://" + addr + "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("/metrics: %d %v", code, err)
		}
		metrics, missing = body, nil
		for _, want := range wantedMetrics {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(testutil.PollEvery)
	}
	for _, m := range missing {
		t.Errorf("/metrics lacks %s (waited 30s)", m)
	}
	for _, id := range ids {
		if strings.Contains(metrics, `"`+id+`"`) {
			t.Errorf("an item ID (%s) appears as a label value", id)
		}
	}
	if n := e2etest.CountSecrets(metrics); n != 0 {
		t.Fatalf("%d secrets in /metrics", n)
	}

	// Draining: /readyz answers 503 until the worker is gone.
	w.Signal(syscall.SIGTERM)
	testutil.WaitFor(t, "/readyz to turn 503 or the worker to exit", 30*time.Second, func() bool {
		code, body, err := e2etest.GetURL("http://" + addr + "/readyz")
		return w.Exited() || (err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "shutting down"))
	})
	if code := w.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("worker exited %d", code)
	}
	if !strings.Contains(w.Log.String(), `"level":"debug"`) {
		t.Error("--log-level debug was not honoured")
	}
	if n := e2etest.CountSecrets(f.Logs()); n != 0 {
		t.Fatalf("%d secrets in the debug logs", n)
	}
}

// --version prints the build version; --help carries examples.
func TestVersionAndHelp(t *testing.T) {
	for _, name := range []string{"worker", "producer"} {
		out, err := exec.Command(e2etest.Binary(t, name), "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version") {
			t.Errorf("%s --version: %q %v", name, out, err)
		}
		out, err = exec.Command(e2etest.Binary(t, name), "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Examples:") {
			t.Errorf("%s --help has no examples: %v\n%s", name, err, out)
		}
	}
}
