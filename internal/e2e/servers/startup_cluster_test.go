package servers

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/testutil"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// A worker started while its NATS cluster cannot take the queue's R3
// streams yet (two of three nodes up: first no meta leader, then "no
// suitable peers for placement") waits: /healthz answers, /readyz says
// "waiting for JetStream: <why>", the log says why at each retry. When the
// third node starts the worker proceeds and runs items. A worker whose
// nats.startup_timeout runs out first exits 3 with one clear line.
func TestWorkerWaitsForAFormingNATSCluster(t *testing.T) {
	c := natstest.StartClusterPartial(t, 3, 2)
	addr := testutil.FreeAddr(t)
	f := newClusterFleetConfig(t, c, "lease_ttl: 3s", "concurrency: 2\nshutdown_grace: 5s\nlisten: "+addr,
		3*time.Second, "SLEEP=0.01")
	w := f.StartWorker("w1")

	// The same fleet with a short bound gives up.
	short := filepath.Join(f.Dir, "short.yaml")
	bounded := strings.Replace(readConfig(f), "nats:\n", "nats:\n  startup_timeout: 2s\n", 1)
	bounded = strings.Replace(bounded, "listen: "+addr, `listen: ""`, 1)
	if err := os.WriteFile(short, []byte(bounded), 0o600); err != nil {
		t.Fatal(err)
	}
	quitter := f.Start("quitter", e2etest.Binary(t, "worker"), "--config", short, "--id", "quitter")

	var why string
	testutil.WaitFor(t, "/readyz to say the worker waits for JetStream", time.Minute, func() bool {
		code, body, err := e2etest.GetURL("http://" + addr + "/readyz")
		why = strings.TrimSpace(body)
		return err == nil && code == http.StatusServiceUnavailable && strings.HasPrefix(why, "waiting for JetStream: ")
	})
	if code, body, err := e2etest.GetURL("http://" + addr + "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("/healthz while waiting: %d %q %v", code, body, err)
	}
	if code := quitter.WaitExit(t, time.Minute); code != 3 {
		t.Fatalf("worker with startup_timeout 2s: want exit 3, got %d:\n%s", code, e2etest.Tail(quitter.Log.String(), 10))
	}
	last := lastLine(quitter.Log.String())
	if !strings.HasPrefix(last, "worker: JetStream not ready after ") {
		t.Fatalf("want one line \"worker: JetStream not ready after ...\", got:\n%s", e2etest.Tail(quitter.Log.String(), 10))
	}
	if w.Exited() {
		t.Fatalf("the worker with the default bound exited while waiting:\n%s", e2etest.Tail(w.Log.String(), 20))
	}

	started := time.Now()
	c.StartNode(2)
	testutil.WaitFor(t, "/readyz to answer 200 after the third node started", time.Minute, func() bool {
		code, _, err := e2etest.GetURL("http://" + addr + "/readyz")
		return err == nil && code == http.StatusOK
	})
	ready := time.Since(started)
	log := w.Log.String()
	retries := strings.Count(log, "JetStream not ready yet")
	if retries == 0 || !strings.Contains(log, "next_in") {
		t.Fatalf("no retry logged with its wait:\n%s", e2etest.Tail(log, 20))
	}

	openClusterQueue(f, c, 3*time.Second)
	const n = 20
	f.Publish("forming", "exec", n, e2etest.ItemJSON)
	res := f.WaitResults("forming", n, time.Minute)
	for id, r := range res {
		if r.Outcome != kftype.OutcomeSucceeded {
			t.Errorf("%s: %s (%s)", id, r.Outcome, r.Error)
		}
	}
	info, err := f.Queue.JetStream().Stream(t.Context(), "KF")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(info.CachedInfo().Cluster.Replicas) + 1; got != 3 {
		t.Errorf("the worker made the work stream on %d nodes, want 3", got)
	}
	e2etest.StopWorkers(t, 30*time.Second, w)
	t.Logf("waited with %d retries (last: %s); ready %s after the third node; quitter: %s",
		retries, why, ready.Round(time.Millisecond), last)
}
