//go:build unix && !linux

package jobguard

import (
	"errors"
	"os"
	"syscall"
)

func executable() (string, error) { return os.Executable() }

// setDeathSignal does nothing: only Linux and FreeBSD have a parent-death
// signal, and the guard alone covers the job processes here.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}

func awaitExit(int) error { return errors.ErrUnsupported }
