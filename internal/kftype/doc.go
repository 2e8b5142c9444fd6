// Package kftype holds keyfleet's domain types, shared by the queue
// (internal/queue, which stores them in NATS), the workers, the operator
// actions (internal/ops) and the views: a work item, a batch's record
// and its states, an item's result and outcome, a dead letter, and an
// amount of money. It is a leaf: it imports no NATS or Redis code, and of
// keyfleet's own packages only internal/jsonl (a leaf too), so that any
// package can use these types without an import cycle (as River's
// rivertype).
package kftype
