package worker

import (
	"slices"
	"strings"

	"github.com/keyfleet/keyfleet/internal/executor"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// laneClasses are the classes of lane's items, from its batch record: one
// per kind the batch was enqueued with (the record's comma-separated
// list), at the lane's scope. A kind this worker does not know gets a
// class of its own, never full here. No kinds known: none (the lane is
// never passed over).
func (w *Worker) laneClasses(b kftype.BatchInfo, lane string) []string {
	_, scope := kftype.LaneParts(lane)
	var out []string
	for _, kind := range b.Kinds {
		var class string
		if _, ok := w.handlers[kind]; ok {
			class = executor.WaitClass(w.keysFor(kind), scope)
		} else {
			class = "?" + kind + "|" + scope
		}
		if strings.ContainsAny(class, " \t\n\v\f\r") || slices.Contains(out, class) {
			continue
		}
		out = append(out, class)
	}
	return out
}
