package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// guardScript is an exec job that checks, inside the job, that no other
// job holds its credential (mkdir is atomic), that it got the right
// secret, and that no other key's variable reached it; it records each run
// and prints its item and attempt.
const guardScript = `D="{{dir}}"
if ! mkdir "$D/held-$KEYFLEET_CREDENTIAL_ID" 2>/dev/null; then
  echo "overlap on $KEYFLEET_CREDENTIAL_ID by $KEYFLEET_ITEM_ID" >> "$D/violations"
fi
want=$(cat "$D/secret-$KEYFLEET_CREDENTIAL_ID")
[ "$want" = "$KEYFLEET_CREDENTIAL_SECRET" ] || echo "wrong secret for $KEYFLEET_CREDENTIAL_ID" >> "$D/violations"
[ -z "$KEY_A$KEY_B" ] || echo "a secret_env variable reached the job" >> "$D/violations"
echo "$KEYFLEET_ITEM_ID $KEYFLEET_ATTEMPT" >> "$D/runs"
cat > /dev/null
sleep ${SLEEP:-0.005}
rmdir "$D/held-$KEYFLEET_CREDENTIAL_ID"
printf 'out:%s:%s' "$KEYFLEET_ITEM_ID" "$KEYFLEET_ATTEMPT"
`

var testSecrets = map[string]string{"key-a": "sk-test-AAAA-1111-secret", "key-b": "sk-test-BBBB-2222-secret"}

func guardedFleet(t *testing.T, workerYAML, queueYAML string, extraEnv ...string) *fleet {
	t.Helper()
	return guardedFleetPool(t, "", workerYAML, queueYAML, extraEnv...)
}

func guardedFleetPool(t *testing.T, poolYAML, workerYAML, queueYAML string, extraEnv ...string) *fleet {
	t.Helper()
	f := newFleet(t, guardedOptions(poolYAML, workerYAML, queueYAML, extraEnv...))
	f.writeGuard(guardScript)
	return f
}

// guardedOptions: the two test keys (max_concurrent 1 each) and an exec
// job running guard.sh in the fleet's directory (writeGuard).
func guardedOptions(poolYAML, workerYAML, queueYAML string, extraEnv ...string) fleetOptions {
	return fleetOptions{
		Pool: poolYAML,
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 1}
- {id: key-b, secret_env: KEY_B, max_concurrent: 1}`,
		Worker: workerYAML,
		Queue:  queueYAML,
		Jobs: `exec:
  command: ["{{dir}}/guard.sh"]
  timeout: 1m`,
		Env: append([]string{"KEY_A=" + testSecrets["key-a"], "KEY_B=" + testSecrets["key-b"]}, extraEnv...),
	}
}

// writeGuard writes script (guardScript or holdGuardScript) as guard.sh
// and the test keys' secrets, for it to check, into the fleet's directory.
func (f *fleet) writeGuard(script string) {
	f.t.Helper()
	f.writeScript("guard.sh", strings.ReplaceAll(script, "{{dir}}", f.dir))
	for id, s := range testSecrets {
		if err := os.WriteFile(filepath.Join(f.dir, "secret-"+id), []byte(s), 0o600); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fleet) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(f.dir, name))
	return string(b)
}

// runsPerItem counts the runs the job recorded, by item.
func (f *fleet) runsPerItem() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(f.file("runs")), "\n") {
		if id, _, ok := strings.Cut(line, " "); ok {
			out[id]++
		}
	}
	return out
}

// assertRanOnceSafely fails the test if an item ran more than once or a
// job saw a violation (a credential used by two jobs at once, a wrong
// secret).
func (f *fleet) assertRanOnceSafely() {
	f.t.Helper()
	for id, c := range f.runsPerItem() {
		if c != 1 {
			f.t.Fatalf("%s ran %d times", id, c)
		}
	}
	if v := f.file("violations"); v != "" {
		f.t.Fatal(v)
	}
}

func (f *fleet) assertNoSecretsInLogs() {
	f.t.Helper()
	logs := f.logs()
	for id, s := range testSecrets {
		if strings.Contains(logs, s) {
			f.t.Fatalf("the secret of %s appears in a log", id)
		}
	}
}

// Three worker processes over two credentials of concurrency 1: every item
// succeeds once, no credential is ever used by two jobs at once, secrets
// reach the jobs and no log.
func TestThreeWorkersShareTwoKeys(t *testing.T) {
	f := guardedFleet(t, "concurrency: 3", "")
	const n = 300
	start := time.Now()
	ids := f.publish("b1", "exec", n, itemJSON)
	workers := []*proc{f.startWorker("w1"), f.startWorker("w2"), f.startWorker("w3")}
	results := f.waitResults("b1", n, 2*time.Minute)
	took := time.Since(start)

	for _, id := range ids {
		r, ok := results[id]
		if !ok {
			t.Fatalf("no result for %s", id)
		}
		if r.Outcome != queue.OutcomeSucceeded || r.Output != fmt.Sprintf("out:%s:1", id) || r.Attempts != 1 {
			t.Fatalf("result of %s: %+v", id, r)
		}
		if r.CredentialID != "key-a" && r.CredentialID != "key-b" {
			t.Fatalf("credential %q", r.CredentialID)
		}
	}
	if v := f.file("violations"); v != "" {
		t.Fatalf("violations seen by the jobs:\n%s", v)
	}
	runs := f.runsPerItem()
	dups := 0
	for _, c := range runs {
		if c > 1 {
			dups++
		}
	}
	if len(runs) != n || dups != 0 {
		t.Fatalf("runs: %d items ran, %d more than once", len(runs), dups)
	}
	stopAt := time.Now()
	stopFleet(t, 30*time.Second, workers...)
	t.Logf("clean shutdown of 3 workers took %s", time.Since(stopAt).Round(time.Millisecond))
	st := f.queueStats()
	if st.Stream.Messages != 0 || st.Consumer.AckPending != 0 {
		t.Fatalf("queue not empty after the batch: %+v", st)
	}
	f.assertNoSecretsInLogs()
	f.account("3 workers share 2 keys (concurrency 1)", ids, results, took, bounds{}, "")
}
