package testutil

import (
	"testing"

	"github.com/keyfleet/keyfleet/internal/testutil/launch"
)

// FreeAddr is a loopback address nothing listens on (launch.FreeAddr); it
// fails the test when there is none.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := launch.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// SilentServer is the address of a TCP server that accepts connections and
// never says a word (launch.StartSilent), closed at the end of the test.
func SilentServer(t testing.TB) string {
	t.Helper()
	s, err := launch.StartSilent()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr()
}
