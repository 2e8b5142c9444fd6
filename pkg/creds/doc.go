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
// Acquire blocks until a credential is usable or the context ends. Waiters
// queue fleet-wide in Redis, by priority, then in the order they began to
// wait, in one queue per class (the key group and scope they wait for):
// the script that frees capacity (a release, a rest or window ending, an
// admin change) grants it to the first waiter that can use it, looking at
// the first waiter of each class only, so that a class that waits costs
// one look however many waiters it holds, and sends one message to that
// waiter's process. Waiting is event-driven: a cooldown, lease expiry or
// rate window is acted on at the exact moment it ends by one process
// that holds the pool's timer. There is no fixed-interval polling. A
// process sends its callers' operations in steps, one script call
// carrying every operation asked for meanwhile, so one release costs a
// couple of script calls, not one per waiter.
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
