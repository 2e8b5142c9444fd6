package jobs

import (
	"os"

	"golang.org/x/sys/unix"
)

// unreadBytes is how many bytes wait unread in the pipe f writes to
// (FIONREAD, TIOCINQ on Linux, works on either end of a pipe), or -1 when unknown. It
// goes through SyscallConn, which keeps f's deadlines working (Fd would
// turn them off).
func unreadBytes(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	if err := rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n = v
		}
	}); err != nil {
		return -1
	}
	return n
}
