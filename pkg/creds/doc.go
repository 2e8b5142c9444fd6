// Package creds is a pool of rate-limited API credentials shared through
// Redis by any number of processes on any number of machines.
//
// A credential has an ID, a concurrency limit (leases held at once), the
// key groups it belongs to, and any number of limits (Limit): at most N
// starts in any window of length P, a smooth rate with a burst (GCRA), or
// at most N cost units in any window, each binding every start on the
// credential or only those of one scope (an API's limit per model). A
// start needs room in every limit that applies to it and is charged to
// all of them at once; the real cost, when the run reports it, replaces
// the estimate. A credential is available, leased, resting or paced
// until a moment (with the cause), or disabled with a reason and by whom.
// Each decision (acquire, renew, settle, register, admin changes, stats)
// is one Lua script, atomic, on Redis time, so every process enforces the
// same limits, and limits changed at run time apply at the next acquire.
//
// Acquire blocks until a credential is usable or the context ends; a
// Request may limit it to a KeySet (one kind's keys) and a scope, and
// give it a cost and a priority. Waiters queue fleet-wide in Redis, by
// priority, then in the order they began to wait, in one queue per class
// (the key set and scope they wait for): the script that frees capacity
// (a release, a rest or window ending, an admin change) grants it to the
// first waiter that can use it, looking at the first waiter of each
// class only, so that a class that waits costs one look however many
// waiters it holds, and sends the lease in one message to that waiter's
// process, which starts on it without another call. A
// cost that only disabled credentials could take fails at once with
// ErrNeverFits instead of waiting. Waiting is event-driven: a rest, lease
// expiry or rate window is acted on at the exact moment it ends by one
// process that holds the pool's timer. There is no fixed-interval
// polling. A process sends its callers' operations in steps, one script
// call carrying every operation asked for meanwhile, so one release
// costs a couple of script calls, not one per waiter.
//
// A lease carries a TTL and a fencing token. The holder renews it while it
// works; a crashed holder's lease simply expires. Renew and release with a
// stale lease fail with ErrLeaseLost and change nothing. Tokens increase
// strictly across the pool, even after Redis loses its state.
//
// Settle ends a lease with what the API said (Outcome): a Retry-After
// rests the credential fleet-wide; a bare 429 widens the spacing of its
// starts, which each success narrows again; rate-limit headers (Signals)
// rest it before a 429 when they say it cannot take the next start. A
// refusal (401, 402, 403, insufficient quota) is evidence, not a verdict:
// a credential is disabled once it has refused RefusalsToDisable
// different items in a row, and until then it takes one request at a
// time. A disabled credential comes back with Enable, or with
// EnableAfterProbe when a probe (ClaimProbe spaces them fleet-wide) finds
// that the API takes it again.
//
// Selection is least recently used among usable credentials. All keys of a
// pool share one hash tag ({name}), so a pool works on Redis Cluster.
//
// The pool never sees secrets: it stores IDs, limits and states only. It
// does not log.
package creds
