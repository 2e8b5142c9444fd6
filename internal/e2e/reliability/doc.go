// Package reliability holds the fault scenarios of the reliability suite
// (docs/reliability.md): network partitions, latency and resets, paused
// and slow workers, chaos kills, secrets never leaking. Each records a row
// of the reliability table its TestMain prints. The harness is
// internal/e2e/e2etest.
package reliability
