// Package providers holds the end-to-end tests of the provider kinds
// (OpenAI, Anthropic, OpenAI-compatible, against internal/fakeapi's
// stand-ins), the handler examples, and spend: budgets and tenants. The
// harness is internal/e2e/e2etest.
package providers
