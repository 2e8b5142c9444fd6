package worker

import "github.com/keyfleet/keyfleet/internal/executor"

// fallbackOf is kind's fallback as the executor takes it (nil: none): an
// item of the kind runs on those kinds, in place, when the kind's keys
// cannot serve it (internal/executor, fallback.go). Every worker runs
// every kind its config defines, so a fallback kind's handler and keys
// are the worker's own.
func (w *Worker) fallbackOf(kind string) *executor.Fallback {
	after, ok := w.fallbacks.After(kind)
	if !ok {
		return nil
	}
	return &executor.Fallback{Kinds: w.fallbacks.Kinds(kind), After: after}
}
