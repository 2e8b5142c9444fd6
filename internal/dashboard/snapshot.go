package dashboard

import (
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/status"
)

// Snapshot is the JSON of /api/status and of each server-sent event: the
// report `producer status --json` prints (its keys inline), plus what the
// dashboard adds:
//
//	"batches":          [{"id", "kind", "total", "total_known", "done", "succeeded", "failed",
//	                      "rate" (items/s), "eta_seconds", "eta", "complete",
//	                      "enqueued_at", "last_result_at"}]  running first, at most 50
//	"dead_letter_list": [{"item", "batch", "kind", "reason", "attempts", "failures",
//	                      "error", "worker", "failed_at"}]  newest first, at most 100
//	"dashboard":        {"read_only", "interval_ms", "history_seconds", "sample",
//	                      "error", "error_at", "results_caught_up", "heartbeat_ttl_seconds", "version"}
//
// It holds no secret: the pool knows credential IDs only, dead letters
// carry no payload here, and error texts are scrubbed of the configured
// server passwords and the admin token. Whoever has not the admin token
// reads it Public: without any text a job or an API wrote.
type Snapshot struct {
	status.Report
	Batches        []Batch      `json:"batches"`
	DeadLetterList []DeadLetter `json:"dead_letter_list"`
	Dashboard      Meta         `json:"dashboard"`
}

// Public returns a copy of s for a reader without the admin token: the
// report's reasons as their class (status.Report.Public), and each dead
// letter's error as its class (its reason, which is ours, stays).
func (s Snapshot) Public() Snapshot {
	s.Report = s.Report.Public()
	dls := make([]DeadLetter, len(s.DeadLetterList))
	for i, d := range s.DeadLetterList {
		d.Error = status.Class(d.Error)
		dls[i] = d
	}
	s.DeadLetterList = dls
	return s
}

// DeadLetter is a dead-letter record as the page shows it (without the
// item's payload).
type DeadLetter = kftype.DeadLetterSummary

// Meta describes the dashboard itself.
type Meta struct {
	// ReadOnly: no admin token was configured, so the page offers no write
	// action and the server refuses every write.
	ReadOnly       bool  `json:"read_only"`
	IntervalMS     int64 `json:"interval_ms"`
	HistorySeconds int64 `json:"history_seconds"`
	// Sample counts the snapshots taken; the page fetches the charts again
	// when it changes.
	Sample uint64 `json:"sample"`
	// Error is why the last reading failed ("" when it worked); the rest
	// of the snapshot is then the last good reading.
	Error   string     `json:"error"`
	ErrorAt *time.Time `json:"error_at"`
	// ResultsCaughtUp: the results stream has been read to its end once
	// (until then batch counts are still climbing).
	ResultsCaughtUp     bool    `json:"results_caught_up"`
	HeartbeatTTLSeconds float64 `json:"heartbeat_ttl_seconds"`
	Version             string  `json:"version"`
}
