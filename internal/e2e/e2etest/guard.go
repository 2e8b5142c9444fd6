package e2etest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

var Secrets = map[string]string{"key-a": "sk-test-AAAA-1111-secret", "key-b": "sk-test-BBBB-2222-secret"}

func GuardedFleet(t *testing.T, workerYAML, queueYAML string, extraEnv ...string) *Fleet {
	t.Helper()
	return GuardedFleetPool(t, "", workerYAML, queueYAML, extraEnv...)
}

func GuardedFleetPool(t *testing.T, poolYAML, workerYAML, queueYAML string, extraEnv ...string) *Fleet {
	t.Helper()
	f := NewFleet(t, GuardedOptions(poolYAML, workerYAML, queueYAML, extraEnv...))
	f.WriteGuard(guardScript)
	return f
}

// GuardedOptions: the two test keys (max_concurrent 1 each) and an exec
// job running guard.sh in the fleet's directory (writeGuard).
func GuardedOptions(poolYAML, workerYAML, queueYAML string, extraEnv ...string) FleetOptions {
	return FleetOptions{
		Pool: poolYAML,
		Credentials: `- {id: key-a, secret_env: KEY_A, max_concurrent: 1}
- {id: key-b, secret_env: KEY_B, max_concurrent: 1}`,
		Worker: workerYAML,
		Queue:  queueYAML,
		Jobs: `exec:
  command: ["{{dir}}/guard.sh"]
  timeout: 1m`,
		Env: append([]string{"KEY_A=" + Secrets["key-a"], "KEY_B=" + Secrets["key-b"]}, extraEnv...),
	}
}

// WriteGuard writes script (guardScript or holdGuardScript) as guard.sh
// and the test keys' secrets, for it to check, into the fleet's directory.
func (f *Fleet) WriteGuard(script string) {
	f.T.Helper()
	f.WriteScript("guard.sh", strings.ReplaceAll(script, "{{dir}}", f.Dir))
	for id, s := range Secrets {
		if err := os.WriteFile(filepath.Join(f.Dir, "secret-"+id), []byte(s), 0o600); err != nil {
			f.T.Fatal(err)
		}
	}
}

func (f *Fleet) File(name string) string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, name))
	return string(b)
}

// RunsPerItem counts the runs the job recorded, by item.
func (f *Fleet) RunsPerItem() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(f.File("runs")), "\n") {
		if id, _, ok := strings.Cut(line, " "); ok {
			out[id]++
		}
	}
	return out
}

// AssertRanOnceSafely fails the test if an item ran more than once or a
// job saw a violation (a credential used by two jobs at once, a wrong
// secret).
func (f *Fleet) AssertRanOnceSafely() {
	f.T.Helper()
	for id, c := range f.RunsPerItem() {
		if c != 1 {
			f.T.Fatalf("%s ran %d times", id, c)
		}
	}
	if v := f.File("violations"); v != "" {
		f.T.Fatal(v)
	}
}

func (f *Fleet) AssertNoSecretsInLogs() {
	f.T.Helper()
	logs := f.Logs()
	for id, s := range Secrets {
		if strings.Contains(logs, s) {
			f.T.Fatalf("the secret of %s appears in a log", id)
		}
	}
}
