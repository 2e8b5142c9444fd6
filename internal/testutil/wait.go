package testutil

import (
	"testing"
	"time"
)

// PollEvery is how often WaitFor checks its condition.
const PollEvery = 20 * time.Millisecond

// WaitFor polls cond every PollEvery until it holds, and fails the test
// ("timed out after <timeout> waiting for <what>") if it does not within
// timeout.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	WaitForEvery(t, what, timeout, PollEvery, cond)
}

// WaitForEvery is WaitFor polling every interval.
func WaitForEvery(t testing.TB, what string, timeout, every time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}
