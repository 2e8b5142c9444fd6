//go:build !linux

package jobs

import "os"

// unreadBytes is -1 (unknown) where the unread bytes of a pipe cannot be
// asked for: a handler that exits after an answer then costs its next
// item an attempt.
func unreadBytes(*os.File) int { return -1 }
