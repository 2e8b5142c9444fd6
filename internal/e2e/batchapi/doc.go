// Package batchapi holds the end-to-end tests of deadline batches run
// through the providers' Batch APIs (docs/batch-api.md), through the
// worker and producer binaries against the strict stand-in of each
// provider (internal/fakeapi). It is a package of its own so that it runs
// beside internal/e2e; its harness is what it needs of that one's.
package batchapi
