// Package scheduling holds the end-to-end tests of which items run when:
// kinds on their own key groups without head-of-line blocking, batches
// sharing by weight, urgent batches, pause, resume and cancel, batch-scoped
// lanes. The harness is internal/e2e/e2etest.
package scheduling
