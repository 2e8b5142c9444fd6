package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// secretsScript behaves by item ID and prints its own secret in most
// cases: the worker must scrub it from results, dead letters, cooldown and
// disable reasons and logs. key-c is refused (exit 77) whatever the item,
// so it gets disabled with the secret in its reason. Each run checks, like
// guardScript, that it holds its credential alone and got the right secret.
const secretsScript = `D="{{dir}}"
S="$KEYFLEET_CREDENTIAL_SECRET"
C="$KEYFLEET_CREDENTIAL_ID"
id="$KEYFLEET_ITEM_ID"
cat > /dev/null
if ! mkdir "$D/held-$C" 2>/dev/null; then echo "overlap on $C by $id" >> "$D/violations"; fi
[ "$(cat "$D/secret-$C")" = "$S" ] || echo "wrong secret for $C" >> "$D/violations"
echo "$id $KEYFLEET_ATTEMPT $C" >> "$D/runs"
end() { rc=$1; rmdir "$D/held-$C"; [ "$rc" = 0 ] && echo "$id" >> "$D/done"; exit "$rc"; }
count() { n=$(cat "$D/n-$id" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$D/n-$id"; }
fill() { head -c "$1" /dev/zero | tr '\0' "$2"; }
if [ "$C" = key-c ]; then echo "key $S revoked" >&2; end 77; fi
case "$id" in
  ok-*) printf 'ok %s' "$id"; end 0 ;;
  echo-*) printf 'token=%s' "$S"; echo "debug: calling the API with $S" >&2; end 0 ;;
  perm-*) printf 'half an answer for %s' "$S"; echo "bad input; key was $S" >&2; end 65 ;;
  trans-*) echo "upstream down, key $S" >&2; end 1 ;;
  flaky-*) count; if [ $n = 1 ]; then echo "hiccup with $S" >&2; end 1; fi; printf 'ok %s' "$id"; end 0 ;;
  rl-*) count; if [ $n = 1 ]; then echo "Retry-After: 1" >&2; echo "429 for $S" >&2; end 75; fi; printf 'ok %s' "$id"; end 0 ;;
  cutout-*) fill 1014 z; printf '%s' "$S"; end 0 ;;
  cuterr-*) printf '%s' "$S" >&2; fill 2035 x >&2; echo >&2; end 65 ;;
  cutline-*) count; if [ $n = 1 ]; then echo "Retry-After: 1" >&2; fill 190 y >&2; echo "$S" >&2; end 75; fi; printf 'ok %s' "$id"; end 0 ;;
esac
end 3
`

// secretsAll are the scenario's secrets: the shared test secrets and
// key-c's.
var secretsAll = map[string]string{
	"key-a": e2etest.Secrets["key-a"],
	"key-b": e2etest.Secrets["key-b"],
	"key-c": "sk-test-CCCC-3333-secret",
}

// Secrets: after a run with every outcome — successes, permanent and
// transient failures, retries, rate limits with Retry-After (cooldowns), a
// rejected key (disabled), dead letters, and jobs that print their own
// secret on stdout and stderr — no secret is found in any log line, any
// NATS message (every stream's messages with headers, the key-value
// bucket, and a tap on all traffic), any Redis key or value (a full dump,
// and MONITOR of every command), the workers' /metrics, /healthz and
// /readyz, or the output of producer status, creds list, results and dlq
// list. First the test proves each scanner finds a secret planted where it
// looks.
func TestReliabilitySecretsNeverLeak(t *testing.T) {
	f := e2etest.NewFleet(t, e2etest.FleetOptions{
		Credentials: `- {id: key-a, secret_env: KEY_A}
- {id: key-b, secret_env: KEY_B}
- {id: key-c, secret_env: KEY_C}`,
		Pool:   "cooldown: 2s",
		Worker: "concurrency: 3\nmax_attempts: 2\nretry_backoff: [200ms]\nlisten: 127.0.0.1:0",
		Jobs:   "max_output: 1KiB\nexec:\n  command: [\"{{dir}}/secrets.sh\"]\n  timeout: 1m",
		Env:    []string{"KEY_A=" + secretsAll["key-a"], "KEY_B=" + secretsAll["key-b"], "KEY_C=" + secretsAll["key-c"]},
	})
	f.WriteScript("secrets.sh", strings.ReplaceAll(secretsScript, "{{dir}}", f.Dir))
	for id, s := range secretsAll {
		if err := os.WriteFile(filepath.Join(f.Dir, "secret-"+id), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js, err := jetstream.New(f.Conn)
	if err != nil {
		t.Fatal(err)
	}
	rdb := f.Redis.Client(t)
	tap := e2etest.StartNATSTap(t, f.Conn)
	mon := e2etest.StartRedisMonitor(t, f.Redis)
	proveLeakScanners(ctx, t, js, f.Conn, rdb, tap, mon)

	// The batch.
	var ids []string
	want := map[string]string{}
	for _, g := range []struct {
		prefix  string
		n       int
		outcome string
	}{
		{"ok", e2etest.ShortOrFull(12, 300), kftype.OutcomeSucceeded},
		{"echo", 4, kftype.OutcomeSucceeded},
		{"perm", 2, kftype.OutcomeFailed},
		{"trans", 2, kftype.OutcomeFailed},
		{"flaky", 2, kftype.OutcomeSucceeded},
		{"rl", 2, kftype.OutcomeSucceeded},
		{"cutout", 1, kftype.OutcomeSucceeded},
		{"cuterr", 1, kftype.OutcomeFailed},
		{"cutline", 1, kftype.OutcomeSucceeded},
	} {
		for i := range g.n {
			id := fmt.Sprintf("%s-%03d", g.prefix, i)
			ids = append(ids, id)
			want[id] = g.outcome
		}
	}
	items := make([]kftype.Item, len(ids))
	for i, id := range ids {
		items[i] = kftype.Item{ID: id, Batch: "secrets", Kind: "exec", Payload: []byte(fmt.Sprintf(`{"id":%q}`, id))}
	}
	start := time.Now()
	if rep, err := f.Queue.Publish(ctx, items...); err != nil || rep.Published != len(items) {
		t.Fatalf("publish: %+v %v", rep, err)
	}
	workers := []*e2etest.Process{f.StartWorker("w1", "--log-level", "debug"), f.StartWorker("w2", "--log-level", "debug")}
	results := f.WaitResults("secrets", len(ids), 2*time.Minute)
	took := time.Since(start)

	row := e2etest.ReliabilityRow{Scenario: "Secrets: failures, cooldowns, dead letters, jobs printing secrets", Items: len(ids), Took: took}
	for _, id := range ids {
		if r, ok := results[id]; !ok || r.Outcome != want[id] {
			row.Lost++
			t.Errorf("%s: want %s, got %+v", id, want[id], r)
		}
	}
	done := map[string]int{}
	for _, id := range strings.Fields(f.File("done")) {
		done[id]++
	}
	for _, c := range done {
		if c > 1 {
			row.Duplicates++
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(f.File("violations")), "\n") {
		if strings.HasPrefix(line, "overlap") {
			row.OverUse++
		}
		if strings.HasPrefix(line, "wrong secret") {
			t.Errorf("a job got the wrong secret: %s", line)
		}
	}
	// The jobs did print their secrets, and the worker scrubbed them.
	for id, r := range results {
		if strings.HasPrefix(id, "echo-") && r.Output != "token=[REDACTED]" {
			t.Errorf("%s: output %q, want the secret scrubbed to token=[REDACTED]", id, r.Output)
		}
		if strings.HasPrefix(id, "perm-") && (!strings.Contains(r.Error, "key was [REDACTED]") || r.Output != "half an answer for [REDACTED]") {
			t.Errorf("%s: error %q output %q, want the secret scrubbed", id, r.Error, r.Output)
		}
	}

	scan := e2etest.NewLeakScan(secretsAll)
	// While the workers run: their HTTP endpoints, the producer's views,
	// and everything stored.
	for _, w := range workers {
		addr := metricsAddr(t, w)
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			body, err := e2etest.HTTPGet("http://" + addr + path)
			if err != nil {
				t.Fatalf("%s %s: %v", w.Name(), path, err)
			}
			scan.Add(w.Name()+" "+path, body)
		}
	}
	for _, args := range [][]string{
		{"status", "--json"}, {"status"}, {"creds", "list", "--json"}, {"creds", "list"},
		{"results", "--batch", "secrets"}, {"dlq", "list", "--json"}, {"dlq", "list"},
	} {
		r := f.Producer(nil, args...)
		if r.Code != 0 && !(args[0] == "results" && r.Code == 1) {
			t.Fatalf("unexpected exit:\n%s", r)
		}
		scan.Add("producer "+strings.Join(args, " "), r.Stdout+r.Stderr)
		if args[0] == "results" {
			redacted := 0
			for _, r := range resultsJSON(t, r.Stdout) {
				if r.Output == "token=[REDACTED]" {
					redacted++
				}
			}
			if redacted != 4 {
				t.Errorf("producer results shows %d echo items with token=[REDACTED], want 4:\n%s", redacted, r.Stdout)
			}
		}
		if args[0] == "dlq" && args[len(args)-1] == "--json" {
			if n := len(e2etest.ParseJSONArray(t, r.Stdout)); n != 5 {
				t.Errorf("dlq list --json: %d records, want 5 (2 perm, 2 trans, 1 cuterr):\n%s", n, r.Stdout)
			}
		}
		if args[0] == "creds" && args[len(args)-1] == "--json" && !strings.Contains(r.Stdout, "key [REDACTED] revoked") {
			t.Errorf("creds list --json does not show key-c disabled with its scrubbed reason:\n%s", r.Stdout)
		}
	}
	dumpAll(ctx, t, scan, "while running", js, rdb)

	e2etest.StopWorkers(t, 30*time.Second, workers...)
	// After the shutdown: what is left, and everything that went by.
	dumpAll(ctx, t, scan, "after shutdown", js, rdb)
	for _, w := range workers {
		scan.Add("log of "+w.Name(), w.Log.String())
	}
	tapText, tapMsgs := tap.Text()
	scan.Add(fmt.Sprintf("NATS tap (%d messages)", tapMsgs), tapText)
	monText := mon.Text()
	scan.Add("Redis MONITOR", monText)
	scan.Add("redis-server log", strings.Join(f.Redis.LogLines(), "\n"))
	if !strings.Contains(monText, "[REDACTED]") || !strings.Contains(monText, "rest_reason") {
		t.Errorf("Redis never saw a scrubbed cooldown or disable reason: the run lacked the cases it is meant to have")
	}

	sources, bytes, hits, partial := scan.Totals()
	row.LeakedSecrets = hits
	row.Note = fmt.Sprintf("%d sources, %.1f MB scanned", sources, float64(bytes)/1e6)
	if partial > 0 {
		row.Note += fmt.Sprintf("; %d secret fragments left by truncation (known bug)", partial)
	}
	row.Passed = row.Lost == 0 && row.Duplicates == 0 && row.OverUse == 0 && hits == 0 && (partial == 0 || !fragmentsFail)
	e2etest.RecordRow(row)
	t.Logf("scanned:\n%s", scan.Report())
	if hits != 0 {
		t.Errorf("%d secrets found:\n%s", hits, scan.Report())
	}
	if partial != 0 {
		msg := fmt.Sprintf("%d fragments (the first or last %d bytes) of secrets found: a bound cut through a secret "+
			"before the worker scrubbed it (stdout at jobs.max_output, the 2 KiB stderr tail, the 200-byte exit-75/77 reason)",
			partial, e2etest.PartialLen)
		if fragmentsFail {
			t.Error(msg)
		} else {
			t.Log("KNOWN BUG, not failing the test until it is fixed: " + msg)
		}
	}
	if !row.Passed {
		t.Errorf("row %+v", row)
	}
}

// fragmentsFail makes a fragment of a secret fail the test: outputs,
// stderr tails and reasons are scrubbed before any bound cuts them
// (secret.Scrubber.Writer in the job kinds), so none may survive.
const fragmentsFail = true

// dumpAll scans every stream, the key-value buckets and every Redis key.
func dumpAll(ctx context.Context, t *testing.T, scan *e2etest.LeakScan, when string, js jetstream.JetStream, rdb *redis.Client) {
	t.Helper()
	streams, msgs, err := e2etest.DumpStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	scan.Add(fmt.Sprintf("NATS streams %s (%d messages)", when, msgs), streams)
	kv, err := e2etest.DumpKV(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	scan.Add("NATS KV "+when, kv)
	keys, n, err := e2etest.DumpRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	scan.Add(fmt.Sprintf("Redis keys %s (%d keys)", when, n), keys)
}

var listenAddrRE = regexp.MustCompile(`serving /metrics.*"addr":"([^"]+)"`)

// metricsAddr reads the address a worker's listener bound from its log.
func metricsAddr(t *testing.T, w *e2etest.Process) string {
	t.Helper()
	var addr string
	testutil.WaitFor(t, w.Name()+" to log its listen address", 30*time.Second, func() bool {
		m := listenAddrRE.FindStringSubmatch(w.Log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// proveLeakScanners plants secrets where each scanner looks — a message
// with a secret in a header and in the body in a temporary stream, a KV
// value, a Redis key of every type and a key named by a secret — checks
// each scanner counts exactly those, then removes them and clears the taps.
func proveLeakScanners(ctx context.Context, t *testing.T, js jetstream.JetStream, nc *nats.Conn, rdb *redis.Client, tap *e2etest.NATSTap, mon *e2etest.RedisMonitor) {
	t.Helper()
	probe := e2etest.NewLeakScan(secretsAll)
	a, b := secretsAll["key-a"], secretsAll["key-b"]
	expect := func(what string, text string, want int) {
		t.Helper()
		if got, _, _ := probe.Count(text); got != want {
			t.Fatalf("the scanner of %s found %d planted secrets, want %d:\n%s", what, got, want, e2etest.Tail(text, 20))
		}
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEAK_CANARY", Subjects: []string{"leakcanary.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("leakcanary.x")
	m.Header.Set("X-Key", a)
	m.Data = []byte("body with " + b)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEAK_CANARY_KV", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "k", "value "+a); err != nil {
		t.Fatal(err)
	}
	streams, _, err := e2etest.DumpStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	expect("the streams", streams, 3) // header, body, and the KV bucket's stream
	kvText, err := e2etest.DumpKV(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	expect("the KV buckets", kvText, 1)
	testutil.WaitFor(t, "the NATS tap to see the planted messages", 10*time.Second, func() bool {
		text, _ := tap.Text()
		n, _, _ := probe.Count(text)
		return n >= 3
	})

	planted := map[string]func() error{
		"leak:string": func() error { return rdb.Set(ctx, "leak:string", a, 0).Err() },
		"leak:hash":   func() error { return rdb.HSet(ctx, "leak:hash", "f", a).Err() },
		"leak:list":   func() error { return rdb.RPush(ctx, "leak:list", a).Err() },
		"leak:set":    func() error { return rdb.SAdd(ctx, "leak:set", a).Err() },
		"leak:zset":   func() error { return rdb.ZAdd(ctx, "leak:zset", redis.Z{Score: 1, Member: a}).Err() },
		"leak:stream": func() error {
			return rdb.XAdd(ctx, &redis.XAddArgs{Stream: "leak:stream", Values: []string{"f", a}}).Err()
		},
		"leak:" + b: func() error { return rdb.Set(ctx, "leak:"+b, "named by a secret", 0).Err() },
	}
	var keys []string
	for k, plant := range planted {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	dump, _, err := e2etest.DumpRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	expect("Redis keys", dump, len(planted))
	testutil.WaitFor(t, "MONITOR to see the planted values", 10*time.Second, func() bool {
		n, _, _ := probe.Count(mon.Text())
		return n >= len(planted)
	})
	// Fragments: what a cut through the middle of a secret leaves.
	if _, p, _ := probe.Count("…" + a[len(a)-12:] + " and " + b[:12] + "…"); p != 2 {
		t.Fatalf("the fragment count of a cut head and a cut tail is %d, want 2", p)
	}

	// Remove the plants; the scanners see nothing left.
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "LEAK_CANARY"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "LEAK_CANARY_KV"); err != nil {
		t.Fatal(err)
	}
	streams, _, err = e2etest.DumpStreams(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	expect("the streams after the clean-up", streams, 0)
	dump, _, err = e2etest.DumpRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	expect("Redis after the clean-up", dump, 0)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The monitor and the tap start afresh for the run.
	marker := fmt.Sprintf("leak-canary-done-%d", time.Now().UnixNano())
	if err := rdb.Set(ctx, marker, "1", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "MONITOR to catch up", 10*time.Second, func() bool { return strings.Contains(mon.Text(), marker) })
	if err := nc.Publish("leakcanary.done", []byte(marker)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the tap to catch up", 10*time.Second, func() bool { text, _ := tap.Text(); return strings.Contains(text, marker) })
	tap.Reset()
	mon.Reset()
	t.Logf("scanners proven: streams, KV, NATS tap, Redis dump (every type and key names), MONITOR, fragments")
}

// resultsJSON decodes `producer results` output.
func resultsJSON(t *testing.T, out string) []kftype.Result {
	t.Helper()
	var rs []kftype.Result
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r kftype.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("results line %q: %v", line, err)
		}
		rs = append(rs, r)
	}
	return rs
}
