// Package testutil holds helpers shared by tests: real servers on free
// loopback ports (redistest, natstest), built binaries and process control.
package testutil
