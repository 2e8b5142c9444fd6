package jobs_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// scriptOps are what testHandler's "script" mode writes for one item, one
// op per byte of the fuzzer's plan (modulo their number).
var scriptOps = []string{
	"own",     // its own answer: {"id": <its id>, "status": "ok", "output": {"for": <its id>}}
	"prev",    // an answer for the item before it (a late or second answer)
	"other",   // an answer for an item never sent
	"banner",  // a line that is not JSON
	"partial", // an unfinished line, then exit
	"exit",    // exit at once
	"dup",     // its own answer, twice
	"reject",  // an answer for the item before, with status rejected
}

// FuzzPersistentAnswers: whatever a handler interleaves (banners, second
// answers, answers for other items, unfinished lines, exits), an item
// never gets another item's answer: a run either fails or returns the
// output written for its own id. Each item gets up to three ops of the
// plan; at most six items run, through one rig (its processes restart as
// they break).
func FuzzPersistentAnswers(f *testing.F) {
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{6, 9, 9, 0, 9, 9, 1, 0, 9})
	f.Add([]byte{3, 0, 9, 4, 9, 9, 5, 9, 9, 0, 9, 9})
	f.Add([]byte{7, 0, 9, 6, 9, 9, 1, 7, 0})
	f.Add([]byte{2, 1, 0, 0, 6, 9, 7, 1, 0})
	f.Fuzz(func(t *testing.T, plan []byte) {
		if len(plan) > 18 {
			plan = plan[:18]
		}
		r := newPersistentRig(t, func(c *jobs.ExecConfig) { c.Timeout = 400 * time.Millisecond })
		for i := 0; i*3 < len(plan); i++ {
			var ops []string
			for _, b := range plan[i*3 : min(i*3+3, len(plan))] {
				if int(b) < len(scriptOps) {
					ops = append(ops, scriptOps[b])
				}
			}
			id := fmt.Sprintf("item-%d", i)
			payload, _ := json.Marshal(map[string]any{"mode": "script", "ops": ops})
			out, err := r.run(t.Context(), id, string(payload))
			if err != nil {
				continue // a failure is allowed; a crossed answer is not
			}
			var o struct {
				For string `json:"for"`
			}
			if jerr := json.Unmarshal(out.Body, &o); jerr != nil || o.For != id {
				t.Fatalf("item %s (ops %v) got output %q: another item's answer", id, ops, out.Body)
			}
		}
	})
}
