// Package batchapi holds the end-to-end tests of deadline batches run
// through the providers' Batch APIs (docs/batch-api.md), through the
// worker and producer binaries against the strict stand-in of each
// provider (internal/fakeapi), on the harness of internal/e2e/e2etest.
package batchapi
