package kftype

import (
	"encoding/json"
	"time"
)

// Reasons an item is dead-lettered.
const (
	ReasonPermanent     = "permanent failure"
	ReasonOutOfAttempts = "out of attempts"
	ReasonMaxDeliveries = "out of deliveries"
	ReasonUndecodable   = "undecodable message"
	ReasonUnknownKind   = "kind not configured"
	// ReasonRefused: several keys refused the item (401, 402, 403,
	// insufficient quota, exit 77): the item's fault, not the keys'.
	ReasonRefused = "refused by the keys"
	// ReasonRateLimited: rate limited worker.max_rate_limited times in a
	// row.
	ReasonRateLimited = "rate limited too often"
)

// DeadLetter records an item that failed for good. It holds the item's
// payload so that it can be replayed.
type DeadLetter struct {
	DeadLetterSummary
	Payload json.RawMessage `json:"payload"`
	// PayloadTruncated: the payload was cut for the record to fit the
	// server's max payload (Payload is then the text kept, as a JSON
	// string); such an item cannot be replayed.
	PayloadTruncated bool `json:"payload_truncated,omitempty"`

	// Seq is the record's stream sequence (not stored; set by
	// queue.ListDeadLetters): a replay removes the record up to it and not
	// a newer one.
	Seq uint64 `json:"-"`
}

// DeadLetterSummary is a dead-letter record without the item's payload:
// what a list of dead letters shows (its keys are inline in DeadLetter's
// JSON).
type DeadLetterSummary struct {
	Item     string    `json:"item"`
	Batch    string    `json:"batch"`
	Kind     string    `json:"kind"`
	Scope    string    `json:"scope,omitempty"`
	Endpoint string    `json:"endpoint,omitempty"`
	Reason   string    `json:"reason"`
	Attempts int       `json:"attempts"`
	Failures int       `json:"failures"`
	Error    string    `json:"error"`
	Worker   string    `json:"worker"`
	FailedAt time.Time `json:"failed_at"`
}
