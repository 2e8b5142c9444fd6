// Package producer holds the end-to-end tests of the producer's commands:
// enqueue, --wait, status, batch, creds, dlq, results, config and the
// dashboard, against running workers and against unreachable servers; the
// item IDs kept exactly and the terminal safety of what it prints. The
// harness is internal/e2e/e2etest.
package producer
