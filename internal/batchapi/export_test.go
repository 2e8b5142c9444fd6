package batchapi

import (
	"bufio"
	"bytes"
)

// SetCrash makes the runner stop dead at the points crash says (a test's
// crash of the worker there).
func SetCrash(r *Runner, crash func(point string) bool) { r.crash = crash }

// ErrCrash is what a step returns at a crash point.
var ErrCrash = errCrash

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
