package worker

import (
	"context"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/batchapi"
)

// runBatchAPI runs the deadline batches through the providers' Batch
// APIs (internal/batchapi, docs/batch-api.md) until ctx ends: Run starts
// it with the watchers and stops it with them at shutdown. A worker whose
// configuration has no kind of provider openai or anthropic runs none.
func (w *Worker) runBatchAPI(ctx context.Context) {
	if !batchapi.Enabled(w.cfg) {
		return
	}
	r, err := batchapi.New(batchapi.Options{Queue: w.q, Redis: w.rdb, Config: w.cfg, Secrets: w.secrets, Owner: w.id,
		Logger: w.log, Scrubber: w.scrub, Metrics: w.metrics})
	if err != nil {
		w.log.Error("the Batch API runner cannot start: deadline batches wait", zap.Error(err))
		return
	}
	r.Run(ctx)
}
