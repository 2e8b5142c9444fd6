package dashboard

import "time"

// SetTimeouts shortens the connection bounds for a test; the returned
// function restores them.
func SetTimeouts(readBody, write time.Duration) (restore func()) {
	r, w := readBodyTimeout, writeTimeout
	readBodyTimeout, writeTimeout = readBody, write
	return func() { readBodyTimeout, writeTimeout = r, w }
}
