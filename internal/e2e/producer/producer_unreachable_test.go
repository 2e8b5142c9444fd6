package producer

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// An unreachable NATS or Redis, refusing or silent: exit 3 with one clear
// line naming the server, no hang, no panic. (producerTimeout guards against
// a hang; the times are logged.)
func TestProducerUnreachableServers(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f := e2etest.SleepOnlyFleet(t, "", "")
	items := f.WriteInput("items.jsonl", e2etest.JSONLItems(3, `{"id":%q}`))
	for _, srv := range []struct{ name, addr string }{
		{"refused", testutil.FreeAddr(t)},
		{"silent", testutil.SilentServer(t)},
	} {
		natsURL, redisURL := "nats://"+srv.addr, "redis://"+srv.addr+"/0"
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"enqueue", "--kind", "sleep", "--nats-url", natsURL, items}, "NATS at " + natsURL},
			{[]string{"status", "--nats-url", natsURL}, "NATS at " + natsURL},
			{[]string{"results", "--batch", "b", "--nats-url", natsURL}, "NATS at " + natsURL},
			{[]string{"dlq", "list", "--nats-url", natsURL}, "NATS at " + natsURL},
			{[]string{"dlq", "replay", "--nats-url", natsURL}, "NATS at " + natsURL},
			// NATS fine, Redis not.
			{[]string{"status", "--redis-url", redisURL}, "Redis at " + redisURL},
			{[]string{"creds", "list", "--redis-url", redisURL}, "Redis at " + redisURL},
			{[]string{"creds", "disable", "key-a", "--redis-url", redisURL}, "Redis at " + redisURL},
			{[]string{"creds", "set", "key-a", "--rate", "none", "--redis-url", redisURL}, "Redis at " + redisURL},
		} {
			if srv.name == "silent" && tc.args[0] != "enqueue" && strings.Join(tc.args[:2], " ") != "creds list" {
				continue // each waits for the connect timeout: one NATS and one Redis case suffice
			}
			t.Run(srv.name+" "+strings.Join(tc.args[:2], " "), func(t *testing.T) {
				r := f.Producer(nil, tc.args...)
				if r.Code != 3 {
					t.Fatalf("want exit 3:\n%s", r)
				}
				lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
				last := lines[len(lines)-1]
				if !strings.HasPrefix(last, "producer: ") || !strings.Contains(last, tc.want) {
					t.Fatalf("want one line naming %q, got:\n%s", tc.want, r)
				}
				t.Logf("%s: %s", r.Took.Round(time.Millisecond), last)
			})
		}
	}
	// Environment variables name the servers too, and a flag wins over them.
	bad := testutil.FreeAddr(t)
	env := append(f.Env[:len(f.Env):len(f.Env)], "KEYFLEET_NATS_URL=nats://"+bad, "KEYFLEET_REDIS_URL=redis://"+bad)
	if r := e2etest.RunProducer(t, env, nil, "status", "--config", f.ConfigPath); r.Code != 3 || !strings.Contains(r.Stderr, "nats://"+bad) {
		t.Fatalf("KEYFLEET_NATS_URL must override the file:\n%s", r)
	}
	if r := e2etest.RunProducer(t, env, nil, "creds", "list", "--config", f.ConfigPath, "--redis-url", f.Redis.URL()); r.Code != 0 {
		t.Fatalf("--redis-url must override KEYFLEET_REDIS_URL:\n%s", r)
	}
}

var incompleteRE = regexp.MustCompile(`Enqueue incomplete: (\d+) of (\d+) items of batch (\S+) confirmed \((\d+) new, (\d+) duplicates\), (\d+) sent without confirmation, (\d+) not sent`)

// NATS goes away while a large input is being published: the producer says
// exactly how many items the server confirmed and that a rerun is safe,
// exits 3; after a restart the rerun completes the batch without adding
// anything twice.
func TestProducerServerGoneMidPublish(t *testing.T) {
	e2etest.LongWaitingScenario(t)
	f := e2etest.SleepOnlyFleet(t, "", "")
	const n = 100_000
	path := f.WriteInput("items.jsonl", e2etest.JSONLItems(n, `{"id":%q,"ms":0}`))
	p := f.Start("producer", e2etest.Binary(t, "producer"), "enqueue", "--kind", "sleep", "--config", f.ConfigPath, path)
	testutil.WaitFor(t, "publishing to start", time.Minute, func() bool { return f.QueueStats().Stream.Messages > 0 })
	f.NATS.Shutdown()
	// What the producer may wait for once the server is gone, each bounded:
	// its publishes' confirmations (10 s), the batch record's update and
	// read (15 s each, in the publishing loop and after it: up to 45 s),
	// the connection's last flush (2 s). About a minute in all, so a
	// loaded machine gets two; a hang gets no more.
	if code := p.WaitExit(t, 2*time.Minute); code != 3 {
		if code == 0 {
			t.Skipf("the producer finished before the server went away:\n%s", e2etest.Tail(p.Log.String(), 10))
		}
		t.Fatalf("want exit 3, got %d:\n%s", code, e2etest.Tail(p.Log.String(), 20))
	}
	out := p.Log.String()
	m := incompleteRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "Rerunning the same command with the same input is safe") {
		t.Fatalf("no exact account of the partial enqueue:\n%s", e2etest.Tail(out, 20))
	}
	num := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	confirmed, unconfirmed, notSent := num(1), num(6), num(7)
	if num(2) != n || confirmed != num(4)+num(5) || confirmed+unconfirmed+notSent != n {
		t.Fatalf("inconsistent account: %s", m[0])
	}

	f.NATS.StartAgain()
	testutil.WaitFor(t, "the test's connection to come back", time.Minute, func() bool { return f.Conn.IsConnected() })
	stored := f.QueueStats().Stream.Messages
	// Every confirmed publish is stored; an unconfirmed one may be.
	if stored < uint64(confirmed) || stored > uint64(confirmed+unconfirmed) {
		t.Fatalf("stored %d, but %d confirmed and %d unconfirmed", stored, confirmed, unconfirmed)
	}
	r := f.Producer(nil, "enqueue", "--kind", "sleep", path)
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("(%d new, %d duplicates", n-int(stored), stored)) {
		t.Fatalf("rerun: want %d new and %d duplicates:\n%s", n-int(stored), stored, r)
	}
	if st := f.QueueStats(); st.Stream.Messages != n {
		t.Fatalf("after the rerun the stream holds %d messages, want %d", st.Stream.Messages, n)
	}
	t.Logf("server gone: %s; rerun: %s", m[0], strings.TrimSpace(r.Stdout))
}
