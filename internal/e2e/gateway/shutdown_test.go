package gateway

import (
	"syscall"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The first SIGTERM stops the gateway taking requests and lets the one
// being answered end within worker.shutdown_grace: its caller gets its
// reply, its key is settled, and the worker exits 0.
func TestShutdownLetsARequestFinish(t *testing.T) {
	f := newFleet(t, options{worker: "shutdown_grace: 20s"})
	w := f.startWorker("w1")
	done := make(chan reply, 1)
	go func() {
		done <- postNoFail(f.gateway+"/chat/v1/chat/completions",
			`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Take your time [fake:latency=1500ms]"}],"max_tokens":5}`,
			"Authorization", "Bearer "+appToken)
	}()
	testutil.WaitFor(t, "the request to reach the API", time.Minute, func() bool { return len(f.oa.Received()) == 1 })
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Receive(t, done, time.Minute, "the request in flight got no reply"); got.status != 200 {
		t.Fatalf("the request in flight at SIGTERM: %d %s", got.status, got.body)
	}
	if code := w.WaitExit(t, time.Minute); code != 0 {
		t.Fatalf("the worker exited %d after SIGTERM:\n%s", code, e2etest.Tail(w.Log.String(), 30))
	}
	pool := f.Pool()
	st, err := pool.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.InFlight != 0 {
		t.Fatalf("%d leases still held after the worker left", st.InFlight)
	}
}
