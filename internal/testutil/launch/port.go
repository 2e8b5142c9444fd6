package launch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// ErrPortTaken: a server could not listen on its port because something
// else holds it (a parallel test took the port between FreePort and the
// server's listen).
var ErrPortTaken = errors.New("launch: port already in use")

// portTries is how many free ports a server is started on before its
// launcher gives up.
const portTries = 5

// onFreePort calls start with a port FreePort picked until start does not
// fail with ErrPortTaken, at most portTries times.
func onFreePort(start func(port int) error) error {
	var err error
	for range portTries {
		port, perr := FreePort()
		if perr != nil {
			return perr
		}
		if err = start(port); !errors.Is(err, ErrPortTaken) {
			return err
		}
	}
	return fmt.Errorf("launch: %d free ports taken before the server listened: %w", portTries, err)
}

// portTakenIn reports whether a server's log says its listen failed on a
// port in use.
func portTakenIn(log string) bool {
	return strings.Contains(log, "address already in use")
}

// fileTail is the end of a log file ("" when it cannot be read).
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b[max(0, len(b)-n):])
}

// samePortWait bounds how long an embedded server waits for the port it
// must have (a reserved or earlier one) to be let go.
const samePortWait = 5 * time.Second
