// Package bench is keyfleet's benchmark program, run by `make bench`
// (bench/cmd/kfbench is its thin main). It is a Go module of its own
// (github.com/keyfleet/keyfleet/bench, which replaces the keyfleet module
// with ../), so that `go test ./...` at the repository's root neither
// builds nor runs it; `make bench-smoke` runs its tests.
//
// It starts its own nats-server (built in the keyfleet module, a separate process,
// JetStream on file storage) and redis-server on loopback ports, once for
// the whole program; every run of every scenario uses fresh stream,
// subject, consumer and pool names and deletes its streams and flushes
// Redis when it ends. Worker and producer run as real processes built
// without -race, except where a scenario measures a library path in
// process (it says so in its figures' names).
//
// Each scenario runs Options.Runs times; each figure is reported as the
// median of the runs with their min and max. The ceilings (raw JetStream
// publish, pull and ack of the same messages; a raw EVALSHA loop; the
// pool's own acquire+release) are measured inside the same runs, so every
// keyfleet figure has its ratio to a ceiling beside it. Beside the figures
// the program accounts CPU per item and per process (nats-server,
// redis-server, the workers, the producer, the benchmark process itself)
// and Redis commands per item, so that a missed target can be traced to
// the process that spent the time.
//
// One file per scenario: throughput.go, enqueue.go, contended.go, rate.go,
// handoff.go, shutdown.go, footprint.go, scale.go, acquirecost.go,
// scopecost.go (9b), shard.go, limits.go, gateway.go, llm.go (13 and 13b, with skew.go), scopes.go (13c), peers.go, persistent.go,
// httpenqueue.go, batches.go, gatewayproxy.go (18a-c); the
// ceilings in ceiling.go. Scenarios 8-11 measure pkg/creds in process, many pool
// handles each with its own Redis client standing for as many processes
// (handles.go), 9b as well; 12, 13, 13b and 13c run worker processes against internal/fakeapi
// served by this program (api.go records every answer); 14 runs the peer
// harnesses' own run.sh (BullMQ, asynq, the seeds' Python coordinator)
// from a copy in the user's cache directory; 15 runs worker processes
// with a Python handler, persistent and a process per item; 16 enqueues
// over HTTP through a `producer dashboard` process and measures the peak
// RSS of a dry run of 10,000,000 items; 17 steers batches on worker
// processes (priority, fair share, weights, cancel, 100 batches ÷ one);
// 18a-c serve the gateway from worker processes (added latency, behind a
// saturating batch, 1,000 requests/s).
package bench
