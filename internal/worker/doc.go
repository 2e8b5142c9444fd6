// Package worker is the worker daemon: it connects to NATS and Redis, sets
// up the queue and registers the configured credentials (Start), then
// pulls items from the batches' lanes, no more than it has free slots for
// (pull.go: the lane schedule picks the batch), and hands each message to
// the item executor (internal/executor), which reserves a credential, runs
// the job and settles the message. The worker counts what each delivery
// came to (slot.go), keeps its view of the batches (batches.go), wakes
// its puller once a changed batch's lanes are in the schedule
// (lanewait.go), registers the lanes a record's writer left undone
// (lanerepair.go), announces
// itself (heartbeat.go), probes disabled keys (probe.go), serves
// /metrics, /healthz and /readyz (health.go), runs the Batch API runner
// (batchapi.go) and shuts down in two phases (Run).
//
// Its adapters give the executor what it asks for: the JetStream message
// as an executor.Delivery (delivery.go), results and dead letters through
// the queue and its group committer (recorder.go), and the per-item run
// counters as one Redis script (runs.go, runs.lua).
package worker
