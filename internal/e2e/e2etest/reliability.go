package e2etest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// The reliability suite (issue: proof of reliability and security) runs
// scenarios against real servers and real worker processes. Each one
// records a row — scenario, items, lost, duplicates, credential over-use
// events, leaked secrets, time — asserts its bounds, and TestMain prints
// the rows as a table at the end.
//
// KEYFLEET_RELIABILITY=full (make test-reliability) runs every scenario at
// full size; otherwise (make test, CI) they run a short profile: fewer
// items and shorter chaos.

// FullProfile reports whether the full-size profile is on.
func FullProfile() bool { return os.Getenv("KEYFLEET_RELIABILITY") == "full" }

// ShortOrFull picks the short or the full figure.
func ShortOrFull[T any](short, full T) T {
	if FullProfile() {
		return full
	}
	return short
}

// ReliabilityRow is one line of the table.
type ReliabilityRow struct {
	Scenario      string        `json:"scenario"`
	Items         int           `json:"items"`
	Lost          int           `json:"lost"`
	Duplicates    int           `json:"duplicates"`
	OverUse       int           `json:"over_use"`
	LeakedSecrets int           `json:"leaked_secrets"`
	Took          time.Duration `json:"took"`
	Note          string        `json:"note,omitempty"`
	Passed        bool          `json:"passed"`
}

var reliability struct {
	mu   sync.Mutex
	rows []ReliabilityRow
}

// Bounds are what a scenario promises.
type Bounds struct {
	// MaxDuplicates: items allowed to run more than once (those in flight
	// at a kill or a cut); 0 unless said.
	MaxDuplicates int
	// MaxOverUse: times a credential may be seen in use by two jobs at once
	// (only inside a Redis state loss, which the scenario documents).
	MaxOverUse int
}

// Account closes a scenario run on a guarded fleet (guardScript jobs): it
// counts lost items (no successful result), duplicates (items the job ran
// more than once), over-use events (the job found its credential held),
// and leaked secrets (any test secret in any process's output); records
// the row; and fails the test if a bound is broken. Lost and leaked must be
// 0 always.
func (f *Fleet) Account(scenario string, ids []string, results map[string]kftype.Result, took time.Duration, b Bounds, note string) ReliabilityRow {
	f.T.Helper()
	row := ReliabilityRow{Scenario: scenario, Items: len(ids), Took: took, Note: note}
	for _, id := range ids {
		if r, ok := results[id]; !ok || r.Outcome != kftype.OutcomeSucceeded {
			row.Lost++
		}
	}
	for _, c := range f.RunsPerItem() {
		if c > 1 {
			row.Duplicates++
		}
	}
	if v := strings.TrimSpace(f.File("violations")); v != "" {
		for _, line := range strings.Split(v, "\n") {
			if strings.HasPrefix(line, "overlap") {
				row.OverUse++
			}
		}
	}
	row.LeakedSecrets = CountSecrets(f.Logs())
	row.Passed = row.Lost == 0 && row.LeakedSecrets == 0 && row.Duplicates <= b.MaxDuplicates && row.OverUse <= b.MaxOverUse
	RecordRow(row)
	if !row.Passed {
		f.T.Errorf("%s: %+v breaks its bounds %+v (lost and leaked secrets must be 0); violations:\n%s\njob events around them:\n%s",
			scenario, row, b, f.File("violations"), eventsAround(f.File("violations"), f.File("events")))
	}
	if v := strings.TrimSpace(f.File("violations")); strings.Contains(v, "wrong secret") || strings.Contains(v, "secret_env") {
		f.T.Errorf("%s: a job got the wrong secret or saw another key's variable:\n%s", scenario, v)
	}
	return row
}

// eventsAround returns the job events (holdGuardScript's log, if the
// fleet's job keeps one) from 10 lines before to 10 after each overlap's
// item's first event, for a failure's message.
func eventsAround(violations, events string) string {
	lines := strings.Split(strings.TrimSpace(events), "\n")
	var b strings.Builder
	for _, v := range strings.Split(strings.TrimSpace(violations), "\n") {
		_, rest, ok := strings.Cut(v, " by ")
		if !strings.HasPrefix(v, "overlap") || !ok {
			continue
		}
		item, _, _ := strings.Cut(rest, " ")
		for i, l := range lines {
			if strings.Contains(l, " "+item+" ") {
				fmt.Fprintf(&b, "--- %s\n%s\n", v, strings.Join(lines[max(0, i-10):min(len(lines), i+11)], "\n"))
				break
			}
		}
	}
	return b.String()
}

// CountSecrets counts occurrences of the test secrets in text.
func CountSecrets(text string) int {
	n := 0
	for _, s := range Secrets {
		n += strings.Count(text, s)
	}
	return n
}

func RecordRow(r ReliabilityRow) {
	reliability.mu.Lock()
	reliability.rows = append(reliability.rows, r)
	reliability.mu.Unlock()
	if p := os.Getenv("KEYFLEET_RELIABILITY_REPORT"); p != "" {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			b, _ := json.Marshal(r)
			_, _ = f.Write(append(b, '\n'))
			f.Close()
		}
	}
}

// printReliabilityTable prints the rows recorded by this test binary.
func printReliabilityTable(w io.Writer) {
	reliability.mu.Lock()
	rows := append([]ReliabilityRow(nil), reliability.rows...)
	reliability.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Scenario < rows[j].Scenario })
	profile := "short"
	if FullProfile() {
		profile = "full"
	}
	fmt.Fprintf(w, "\nReliability (%s profile):\n", profile)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tITEMS\tLOST\tDUPLICATES\tOVER-USE\tLEAKED SECRETS\tTIME\tRESULT\tNOTE")
	for _, r := range rows {
		res := "ok"
		if !r.Passed {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Scenario, r.Items, r.Lost, r.Duplicates, r.OverUse,
			r.LeakedSecrets, r.Took.Round(100*time.Millisecond), res, r.Note)
	}
	tw.Flush()
	// A blank line ends the table: go test -v prints the packages' output
	// one after the other, and scripts/test-reliability.sh cuts each table
	// out of it.
	fmt.Fprintln(w)
}
