// Package audit holds the end-to-end regression tests of the holes issue
// 31's audit found (docs/reliability.md, "The audit's holes"), through the
// binaries; each records a row of the reliability table its TestMain
// prints. The harness is internal/e2e/e2etest.
package audit
