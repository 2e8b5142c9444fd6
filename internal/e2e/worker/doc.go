// Package worker holds the end-to-end tests of what workers do with
// items: workers sharing keys, the outcomes of exec and http jobs, key
// limits and pacing, the probe of a key the API disabled, metrics and
// health, key safety. The harness is internal/e2e/e2etest.
package worker
