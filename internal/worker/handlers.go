package worker

import (
	"io"

	"go.uber.org/zap"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// handlerNote logs what a persistent exec handler reports (jobs rate-limits
// the notes: a failure cause or a kind of skipped line at most once a
// minute, stderr at most 20 lines a second; held_back counts those it did
// not pass on since). The texts are scrubbed of every configured secret
// already.
func (w *Worker) handlerNote(n jobs.HandlerNote) {
	log := w.log.With(zap.String("kind", jobs.KindExec), zap.Int("handler_pid", n.PID))
	if n.Dropped > 0 {
		log = log.With(zap.Int("held_back", n.Dropped))
	}
	switch n.Cause {
	case jobs.NoteStderr:
		log.Info("handler stderr", zap.String("line", n.Text))
	case jobs.NoteStarted:
		log.Info("persistent handler started", zap.String("what", n.Text))
	case jobs.NoteStray, jobs.NoteSkipped:
		log.Warn("persistent handler wrote a line that is not the waiting item's answer: skipped, the item's own answer is read on (said once per cause, then at most once a minute)",
			zap.String("cause", n.Cause), zap.String("what", n.Text))
	default:
		log.Warn("persistent handler failed: its item fails as transient (said once per cause, then at most once a minute)",
			zap.String("cause", n.Cause), zap.String("what", n.Text))
	}
}

// closeHandlers stops what the handlers keep running (persistent exec
// handler processes); for a worker whose runs have ended.
func (w *Worker) closeHandlers() {
	for kind, h := range w.handlers {
		if c, ok := h.(io.Closer); ok {
			if err := c.Close(); err != nil {
				w.log.Warn("closing the job handler", zap.String("kind", kind), zap.Error(err))
			}
		}
	}
}
