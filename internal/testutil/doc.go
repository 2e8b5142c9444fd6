// Package testutil holds helpers shared by tests: real servers on free
// loopback ports (launch starts them; redistest and natstest wrap it for
// tests), built binaries and process control.
package testutil
