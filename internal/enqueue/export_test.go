package enqueue

import "time"

// SetCancelCheckEvery changes how often a long enqueue reads and writes
// the batch's record, for a test; the returned function restores it.
func SetCancelCheckEvery(d time.Duration) (restore func()) {
	old := cancelCheckEvery
	cancelCheckEvery = d
	return func() { cancelCheckEvery = old }
}
