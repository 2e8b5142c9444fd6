// Package batchlanes keeps the lane schedule (internal/lanes) in step
// with the batch records (internal/queue): the operation that writes a
// batch's record writes its lanes, and the workers only read them.
//
// Writer turns a record into its lanes — one for the batch's items
// without a scope and one per scope, each at the record's state,
// priority, weight and revision, with the classes its items wait for
// and its tenant's configured weight — and registers them. A queue
// handle given a Writer (queue.Queue.SetLaneWriter) calls it after every
// record it writes: an enqueue, a pause, resume or cancel, a budget
// change, a pause or resume for a budget, a scope a provider batch sends
// back to real time. Repair is the recovery: it registers again the
// lanes the schedule holds at an older revision than their record, or
// not at all (Redis lost its state, or a writer could not reach it or
// died between the two writes).
package batchlanes
