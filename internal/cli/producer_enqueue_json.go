package cli

import "github.com/keyfleet/keyfleet/internal/enqueue"

// enqueueOutput is `enqueue --json`'s object: what POST /api/batches
// answers, with what a dry run or --wait adds.
type enqueueOutput struct {
	Batch      string       `json:"batch"`
	Items      int          `json:"items"`
	New        int          `json:"new"`
	Duplicates int          `json:"duplicates"`
	Kind       string       `json:"kind"`
	Priority   int          `json:"priority"`
	Weight     int          `json:"weight"`
	DryRun     bool         `json:"dry_run,omitempty"`
	Wait       *waitSummary `json:"wait,omitempty"`
}

func enqueueJSON(rep enqueue.Report) enqueueOutput {
	return enqueueOutput{Batch: rep.Batch, Items: rep.Items, New: rep.New, Duplicates: rep.Duplicates, Kind: rep.Kind,
		Priority: rep.Priority, Weight: rep.Weight, DryRun: rep.DryRun}
}
