package jobguard

import (
	"bufio"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// RunIfGuard makes this process the job guard, and exits when done, if New
// started it as one (EnvVar set, argv[0] the guard's name); otherwise it
// returns at once. Call it first in main of every binary that uses New:
// New runs the guard by re-executing that binary.
func RunIfGuard() {
	if os.Getenv(EnvVar) != "1" || len(os.Args) != 1 || os.Args[0] != processName {
		return
	}
	os.Exit(serve(os.Stdin, os.Stdout, os.Getppid()))
}

// serve is the guard process: it keeps the set of groups the lines of in
// register and unregister, says it is ready on ready, and when in ends (or
// a signal comes after its parent, the worker, has gone) kills every group
// in the set, says it is done on ready and returns.
func serve(in io.Reader, ready io.Writer, parent int) int {
	// SIGTERM is the parent-death signal. SIGINT and SIGHUP too may come
	// while the worker lives (a Ctrl-C or a hang-up of its terminal, a
	// supervisor signalling every process): then the worker's own shutdown
	// decides what happens to its jobs, and the guard stays.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)

	var mu sync.Mutex
	groups := map[int]struct{}{}
	if _, err := io.WriteString(ready, readyLine+"\n"); err != nil {
		return 1
	}
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			line := sc.Text()
			if len(line) < 2 {
				continue
			}
			pgid, err := strconv.Atoi(line[1:])
			if err != nil || pgid <= 1 { // never kill(-1) (every process) nor kill(0)
				continue
			}
			mu.Lock()
			switch line[0] {
			case '+':
				groups[pgid] = struct{}{}
			case '-':
				delete(groups, pgid)
			}
			mu.Unlock()
		}
	}()
	for {
		select {
		case <-eof:
		case <-sigs:
			if os.Getppid() == parent {
				continue // the worker lives: not its death
			}
		}
		mu.Lock()
		for pgid := range groups {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		mu.Unlock()
		_, _ = io.WriteString(ready, doneLine+"\n")
		return 0
	}
}
