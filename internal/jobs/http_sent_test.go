package jobs_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// Output.Sent is when the request was written: after the run began, before
// it ended, with a 200 and with a 429 alike; a request never sent leaves
// it zero.
func TestHTTPSent(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	answer := make(chan int)
	url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		w.WriteHeader(<-answer)
	})
	h := newHTTP(t, jobs.HTTPConfig{URL: url})
	for _, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
		begin := time.Now()
		done := make(chan jobs.Output, 1)
		go func() {
			out, _ := h.Run(t.Context(), testItem, testCred)
			done <- out
		}()
		<-arrived
		answer <- status
		out := <-done
		end := time.Now()
		if out.Sent.Before(begin) || out.Sent.After(end) {
			t.Errorf("status %d: sent at %v, want within the run (%v to %v)", status, out.Sent, begin, end)
		}
	}
	bad := newHTTP(t, jobs.HTTPConfig{URL: "http://127.0.0.1:1/"})
	if out, err := bad.Run(t.Context(), testItem, testCred); err == nil || !out.Sent.IsZero() {
		t.Errorf("no server: sent %v (%v), want zero and an error", out.Sent, err)
	}
}
