package e2etest

import (
	"strings"
	"testing"
	"time"
)

// TestReliabilityTableFormat checks the table printer on fixed rows.
func TestReliabilityTableFormat(t *testing.T) {
	reliability.mu.Lock()
	saved := reliability.rows
	reliability.rows = []ReliabilityRow{{Scenario: "x", Items: 3, Took: time.Second, Passed: true}}
	reliability.mu.Unlock()
	var b strings.Builder
	printReliabilityTable(&b)
	reliability.mu.Lock()
	reliability.rows = saved
	reliability.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[2]), " ") != "x 3 0 0 0 0 1s ok" {
		t.Fatalf("table:\n%s", b.String())
	}
}
