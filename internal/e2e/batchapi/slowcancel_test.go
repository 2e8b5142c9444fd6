package batchapi

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil"
)

// The deadline holds when the provider is slow to end a cancel: the
// provider batch, cancelled at the deadline less the margin (5 s), stays
// cancelling for 200 s; keyfleet waits for it half the margin, then its
// items run in real time, and every item has its result by the deadline,
// long before the cancel ends. When the provider then ends it (the
// stand-in told to end it now), the requests it finished before the
// cancel are recorded nowhere (the results stream stored one result per
// item) but counted as paid twice: batch show's spent_twice, the
// provider's own count of them, and the worker's
// keyfleet_batch_api_requests_spent_twice_total.
func TestSlowCancelKeepsTheDeadline(t *testing.T) {
	for _, prov := range providers {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			addr := testutil.FreeAddr(t)
			// A request a second: some are done before the cancel, the rest
			// would take a minute. The keys take every item at once: the
			// half of the margin left for real time (2.5 s) is then a
			// request's time, whatever else loads the machine.
			const n = 40
			f := newFleetWith(t, prov, fleetOptions{batchDelay: n * time.Second, cancelDelay: 200 * time.Second, margin: "5s", listen: addr, slots: n})
			f.StartWorker("w1")
			deadline := time.Now().Add(20 * time.Second).Truncate(time.Second)
			f.enqueue("slow", f.batchFile(n, f.model, func(i int) string { return fmt.Sprintf("q %d", i) }), deadline.Format(time.RFC3339))
			res := f.WaitResults("slow", n, time.Until(deadline)+30*time.Second)
			var last time.Time
			for id, r := range res {
				if r.FinishedAt.After(last) {
					last = r.FinishedAt
				}
				if r.Outcome != kftype.OutcomeSucceeded || r.Via != "" {
					t.Errorf("%s: %+v, want succeeded in real time", id, r)
				}
				if r.FinishedAt.After(deadline) {
					t.Errorf("%s: finished at %s, after the deadline %s", id, r.FinishedAt.Format(time.RFC3339Nano), deadline.Format(time.RFC3339))
				}
			}
			t.Logf("the last result %s before the deadline", deadline.Sub(last).Round(time.Millisecond))
			ps := f.records("slow")
			if len(ps) != 1 || ps[0].Cancel != queue.CancelDeadline || ps[0].State == queue.PBDone || ps[0].RealTime != n {
				t.Fatalf("the provider batch record while its cancel goes on: %+v", ps)
			}

			f.api.SetCancelDelay(0)
			f.waitFor("the provider batch ended and collected", time.Minute, func() bool {
				ps := f.records("slow")
				return len(ps) == 1 && ps[0].State == queue.PBDone
			})
			pb := f.show("slow").ProviderBatches[0]
			if pb.Completed == 0 || pb.SpentTwice != int(pb.Completed) || pb.RealTime != n || pb.Total != n {
				t.Errorf("batch show: %+v, want spent_twice the provider's completed (some), real_time %d", pb, n)
			}
			if st := f.resultsStored(); st != n {
				t.Errorf("the results stream stored %d results for %d items: some recorded twice", st, n)
			}
			if rt := f.realTime(); rt != n {
				t.Errorf("%d real-time requests, want %d", rt, n)
			}
			metric := regexp.MustCompile(`(?m)^keyfleet_batch_api_requests_spent_twice_total\{provider="` + prov + `"\} (\d+)$`)
			testutil.WaitFor(t, "/metrics to count the requests spent twice", 30*time.Second, func() bool {
				code, body, err := e2etest.GetURL("http://" + addr + "/metrics")
				m := metric.FindStringSubmatch(body)
				return err == nil && code == 200 && m != nil && m[1] == strconv.Itoa(pb.SpentTwice)
			})
		})
	}
}
