// Package creds is a pool of rate-limited API credentials shared through
// Redis by any number of processes on any number of machines.
//
// A credential has an ID, a concurrency limit (leases held at once) and an
// optional rate ("at most N starts in any window of length P"). It is
// available, leased, cooling down until a moment, or disabled with a reason.
// Each decision (acquire, renew, release, register, admin changes, stats) is
// one Lua script, atomic, on Redis time, so every process enforces the same
// limits, and limits changed at run time apply at the next acquire.
//
// Acquire blocks until a credential is usable or the context ends. Waiting
// is event-driven: a release publishes a wake message on the pool's channel;
// a cooldown, lease expiry or rate window wakes the waiter at the exact
// moment it ends, because a failed attempt returns that moment. There is no
// fixed-interval polling. Within one process the waiters queue in FIFO order
// and only the head asks Redis, handing the turn to the next waiter after it
// succeeds, so one release costs a couple of script calls, not one per
// waiter.
//
// A lease carries a TTL and a fencing token. The holder renews it while it
// works; a crashed holder's lease simply expires. Renew and release with a
// stale lease fail with ErrLeaseLost and change nothing. Tokens increase
// strictly across the pool, even after Redis loses its state.
//
// Selection is least recently used among usable credentials. All keys of a
// pool share one hash tag ({name}), so a pool works on Redis Cluster.
//
// The pool never sees secrets: it stores IDs, limits and states only.
package creds
