//go:build linux

package jobguard

import (
	"syscall"
	"unsafe"
)

// executable is the binary to run as the guard: this process's own, even
// if its file has been replaced or deleted since (a rolling upgrade).
func executable() (string, error) { return "/proc/self/exe", nil }

func setDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }

// pPID is waitid's P_PID.
const pPID = 1

// awaitExit blocks until the child pid has exited, leaving it a zombie
// (WNOWAIT): its PID, and so its process group's ID, stays reserved.
func awaitExit(pid int) error {
	var info [16]uint64 // a siginfo_t (128 bytes)
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}
