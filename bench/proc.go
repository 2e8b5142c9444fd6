package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// proc is a child process (launch.Proc) whose output goes to a log file
// in the temporary directory; it sits in its own process group, so a
// Ctrl-C on the terminal reaches only the program, which then stops it.
type proc struct {
	*launch.Proc
	logPath string
}

// start starts bin with args; extraEnv is added to the program's
// environment.
func (e *env) start(name, bin string, args, extraEnv []string) (*proc, error) {
	logPath := filepath.Join(e.dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: %s log: %w", name, err)
	}
	defer f.Close()
	lp, err := launch.Start(name, bin, args, launch.Options{
		Env: append(os.Environ(), extraEnv...), Stdout: f, Stderr: f, OwnGroup: true,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	p := &proc{Proc: lp, logPath: logPath}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

func (p *proc) cpu() (float64, error) { return cpuOf(p.Proc) }

// cpuOf is the CPU time (user + system, seconds) of a running process,
// from /proc/<pid>/stat (clock ticks of 10 ms), or of an exited one from
// its rusage (microseconds).
func cpuOf(p *launch.Proc) (float64, error) {
	if st := p.State(); st != nil {
		return (st.UserTime() + st.SystemTime()).Seconds(), nil
	}
	return procCPU(p.Pid())
}

func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: bad utime/stime", pid)
	}
	const userHZ = 100 // USER_HZ, fixed by the Linux ABI
	return (ut + st) / userHZ, nil
}

// statusKB reads a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func statusKB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: /proc/%d/status: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("bench: /proc/%d/status has no %s", pid, field)
}

// selfCPU is this process's CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// logTail is the end of a process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
