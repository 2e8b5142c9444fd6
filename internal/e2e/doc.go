// Package e2e holds end-to-end tests: the real producer and worker binaries
// (built with -race) against an embedded NATS server and a real
// redis-server, driven the way an operator would.
package e2e
