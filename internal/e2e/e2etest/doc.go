// Package e2etest is the harness of the end-to-end tests under
// internal/e2e, and is imported only by them: it builds the worker and
// producer binaries once (Main, the packages' TestMain), starts a fleet's
// servers (an embedded NATS from internal/testutil/natstest, a
// redis-server from internal/testutil/redistest), writes its config,
// launches workers and dashboards (Fleet), runs the producer and the other
// commands (RunProducer, CLIRun), and holds the reliability kit: guarded
// jobs that record overlaps and runs (GuardedFleet, HoldGuardedFleet),
// fault proxies, leak scans, and the table of scenario rows (RecordRow,
// Fleet.Account) that Main prints.
package e2etest
