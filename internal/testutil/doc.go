// Package testutil holds helpers shared by tests: real servers on free
// loopback ports (launch starts them; redistest and natstest wrap it for
// tests), free addresses and silent servers (FreeAddr, SilentServer), built
// binaries and process control.
package testutil
