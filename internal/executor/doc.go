// Package executor runs one delivery of a work item, from its receipt to
// its settlement: the item's life in the worker, in the manner of River's
// JobExecutor. The worker's slot loop hands it a Delivery and gets back an
// Outcome, a typed value saying what became of the item.
//
// Its collaborators are small interfaces that the real types satisfy
// directly or through thin adapters in package worker:
//
//	Delivery  the message: its item, delivery count, ack, nak, term, in-progress ack
//	Pool      the credential pool's lease operations (*creds.Pool)
//	Recorder  results and dead letters (*queue.Queue, *queue.Committer)
//	RunLog    the per-item run counters (worker's Redis script)
//	Batches   the worker's view of the batches: paused, cancelled, priority
//	Host      what the worker keeps for the whole process: Redis health, registering the pool again
//	Clock     now, timers and sleeps: keep-alive ticks, backoffs, settle deadlines
//
// and a Policy built once from the configuration.
//
// The unacknowledged message is the checkpoint. While an item waits for a
// credential or runs, its message is kept alive with confirmed in-progress
// acks and its lease is renewed; if either cannot be kept, the job is
// cancelled and the item is handed back. What a run comes to:
//
//	ok            release, store the result, ack (confirmed)
//	rate limited  rest the credential (Retry-After, else a short rest bounded by pool.cooldown) and run again on another one, no attempt used
//	rejected key  record the refusal against the key and run again on another one, no attempt used;
//	              dead letter once 3 keys (or every key the kind may use) refused it
//	transient     release, nak with the retry backoff; out of attempts: dead letter
//	permanent     release, dead letter
//	interrupted   (shutdown, lost lease or message) release, nak for immediate redelivery, no attempt used
//
// An item of a kind with a fallback (jobs.kinds.<name>.fallback) that
// cannot start on its kind's keys within the fallback's after, or whose
// runs failed twice in a row, runs on a fallback kind's keys, in place:
// the message stays the only checkpoint (fallback.go).
//
// A dead letter is stored before the message is terminated (a term deletes
// it from the work-queue stream). Runs and failures are counted per item in
// the RunLog, so KEYFLEET_ATTEMPT is exact across workers; a run that never
// reported (its worker was killed) counts as a failure at the next start.
package executor
