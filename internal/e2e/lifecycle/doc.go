// Package lifecycle holds the end-to-end tests of workers stopping,
// restarting and dying: SIGTERM and SIGKILL, NATS and Redis restarting
// mid-run, jobs and kept-running handlers dying with their worker, a
// large fleet. The harness is internal/e2e/e2etest.
package lifecycle
