package ratelimit

import "time"

// Result is what a limiter decided. It mirrors redis_rate.Result.
type Result struct {
	// Allowed is the number of events that were allowed (0 when denied).
	Allowed int
	// Remaining is how many more events are allowed right now.
	Remaining int
	// RetryAfter is how long to wait before the denied request can be
	// allowed; -1 when the request was allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its initial
	// state (no events counted).
	ResetAfter time.Duration
}
