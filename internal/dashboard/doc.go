// Package dashboard serves `producer dashboard`: a web page for operators
// over the same report `producer status --json` prints (internal/status),
// plus what only a long-running process can show: each batch's progress
// (its record's total against the results stream), a few minutes of
// history per credential drawn as server-rendered SVG charts, and the dead
// letters with their reasons.
//
// It also mounts the fleet's HTTP API for programs (internal/api: enqueue,
// a batch, its results and items, the write actions the page's buttons
// call), whose batch objects come from this package's tally (apibatches.go).
//
// Layout:
//
//	server.go      routes, security headers, the Host check, Serve
//	collector.go   one loop reads the fleet every interval and publishes a snapshot
//	snapshot.go    the JSON of /api/status and of each server-sent event
//	events.go      the broadcast of snapshots to the page (server-sent events)
//	batches.go     batch progress: results tallied per item, rate and ETA
//	apibatches.go  the tally as the API's batch objects, and the API's changes shown at once
//	history.go     the ring of per-credential samples behind the charts
//	chart.go       the SVG chart of one credential
//	metrics.go     the pool's figures at /metrics
//	assets/        the page (html/template), its script and its style, embedded
//
// Safe by default: the CLI listens on loopback; on a loopback listener
// only loopback Host names are served (no DNS rebinding); cross-origin
// requests are refused before any handler runs; the page is read-only
// unless an admin token is configured, and then each write needs it as a
// bearer token, in a JSON request from the page's own origin. No secret is
// ever read: the dashboard sees credential IDs only.
package dashboard
