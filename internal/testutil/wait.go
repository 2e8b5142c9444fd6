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

// Receive returns the next value from ch, or fails the test with failure
// (t.Fatal) when none comes within timeout.
func Receive[T any](t testing.TB, ch <-chan T, timeout time.Duration, failure string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatal(failure)
		var zero T
		return zero
	}
}

// Closed reports, without waiting, whether ch is closed (or holds a
// value): for a channel closed once to say that something happened.
func Closed[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
