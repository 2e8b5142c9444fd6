// Package worker is the worker daemon's engine: it pulls items from the
// JetStream consumer, no more than it has free slots for, reserves a
// credential from the Redis pool for each, runs the job with the
// credential's secret, and settles the message by the job's outcome.
//
// The unacknowledged message is the checkpoint. While an item waits for a
// credential or runs, its message is kept alive with confirmed in-progress
// acks and its lease is renewed; if either cannot be kept, the job is
// cancelled and the item is handed back. Outcomes:
//
//	ok            release, store the result, ack (confirmed)
//	rate limited  cool the credential down (Retry-After, else pool.cooldown) and run again on another one, no attempt used
//	rejected key  disable the credential with the reason and run again on another one, no attempt used
//	transient     release, nak with the retry backoff; out of attempts: dead letter
//	permanent     release, dead letter
//	interrupted   (shutdown, lost lease or message) release, nak for immediate redelivery, no attempt used
//
// A dead letter is stored before the message is terminated (a term deletes
// it from the work-queue stream). Runs and failures are counted per item in
// Redis, so KEYFLEET_ATTEMPT is exact across workers; a run that never
// reported (its worker was killed) counts as a failure at the next start.
package worker
