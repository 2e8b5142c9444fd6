// Package fallback holds the end-to-end tests of fallbacks between kinds
// (jobs.kinds.<name>.fallback; docs/providers.md, "Fallbacks"): a kind
// whose API is down or whose keys are all disabled has its items run on a
// fallback kind's keys, against two strict stand-ins (internal/fakeapi),
// and new items go back to their own kind once it serves again. The
// harness is internal/e2e/e2etest.
package fallback
