// Package e2e holds no code: its subpackages are the end-to-end tests, the
// real producer and worker binaries (built with -race) against an embedded
// NATS server and a real redis-server, driven the way an operator would.
// They are split by area so that go test runs them side by side:
//
//   - e2etest: the harness they share (servers, binaries, fleets, the CLI
//     helpers, the reliability kit and table); imported only by tests
//   - audit: the holes issue 31's audit found
//   - producer: the producer's commands
//   - worker: what workers do with items (keys, outcomes, limits, probes,
//     metrics)
//   - lifecycle: workers and servers stopping, restarting and dying
//   - scheduling: kinds, batch weights, priorities, pause and cancel, lanes
//   - providers: the provider kinds, the examples, budgets and tenants
//   - reliability: the fault scenarios (network, pauses, chaos, secrets)
//   - servers: authentication and TLS, NATS and Redis clusters
//   - batchapi: deadline batches through the providers' Batch APIs
//
// Each package's TestMain is e2etest.Main: the binaries are built once
// for all of them, and each prints the reliability table of its own rows.
package e2e
