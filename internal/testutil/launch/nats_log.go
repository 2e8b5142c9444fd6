package launch

import (
	"fmt"
	"strings"
	"sync"
)

// errLog keeps a server's last error and fatal log lines (the servers run
// with NoLog: nothing is printed) so that a server that fails to start can
// say why, e.g. a port already in use.
type errLog struct {
	mu    sync.Mutex
	lines []string
}

const errLogLines = 5

func (l *errLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
	if len(l.lines) > errLogLines {
		l.lines = l.lines[len(l.lines)-errLogLines:]
	}
}

// String is the kept lines, or "no error logged".
func (l *errLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "no error logged"
	}
	return strings.Join(l.lines, " | ")
}

// The server.Logger methods: errors and fatal errors are kept, the rest
// dropped.
func (l *errLog) Noticef(string, ...any)         {}
func (l *errLog) Warnf(string, ...any)           {}
func (l *errLog) Debugf(string, ...any)          {}
func (l *errLog) Tracef(string, ...any)          {}
func (l *errLog) Errorf(format string, v ...any) { l.add("[ERR]", format, v...) }
func (l *errLog) Fatalf(format string, v ...any) { l.add("[FTL]", format, v...) }
