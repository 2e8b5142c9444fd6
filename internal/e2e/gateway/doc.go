// Package gateway holds the end-to-end tests of the gateway
// (docs/gateway.md): real worker processes serving the providers' APIs
// on their keys, against internal/fakeapi's strict stand-ins, driven by
// plain HTTP and by the official OpenAI and Anthropic Node SDKs (sdk/,
// installed by scripts/ensure-node-packages.sh). The harness is
// internal/e2e/e2etest.
package gateway
