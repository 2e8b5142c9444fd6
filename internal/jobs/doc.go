// Package jobs defines what a worker runs: the job envelope (Item), the
// Handler interface, the outcome errors a handler returns to tell the runner
// what happened, and the built-in kinds exec, http and sleep.
//
// A handler reports its outcome by the error it returns, in the manner of
// River's JobCancel and JobSnooze:
//
//   - nil: done.
//   - RateLimited: the credential hit a rate limit; cool it down (for the
//     Retry-After if one was given) and run the item again at once, without
//     using up an attempt.
//   - Rejected: the credential was refused (401, 403, 402, insufficient
//     quota, exit 77); disable it and run the item again with another.
//   - Permanent: never retry; dead-letter the item.
//   - any other error: transient; retry after a backoff, using an attempt.
//
// Classify maps an error to its Outcome; the outermost typed error in a
// wrapped chain wins.
package jobs
