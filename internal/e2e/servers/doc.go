// Package servers holds the end-to-end tests of the fleet and its
// servers: NATS and Redis authentication and TLS, a NATS cluster losing
// its leader, workers waiting for a forming NATS cluster, a Redis cluster.
// The harness is internal/e2e/e2etest.
package servers
