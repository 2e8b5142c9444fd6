package launch

import (
	"errors"
	"fmt"
	"testing"
)

// A launcher whose free port was taken before its server listened starts
// again on another; any other failure is returned at once.
func TestOnFreePortRetriesAPortTaken(t *testing.T) {
	var ports []int
	err := onFreePort(func(port int) error {
		ports = append(ports, port)
		if len(ports) < 3 {
			return fmt.Errorf("%w: port %d", ErrPortTaken, port)
		}
		return nil
	})
	if err != nil || len(ports) != 3 {
		t.Fatalf("two ports taken, the third free: err %v after %d starts", err, len(ports))
	}
	bad := errors.New("bad flag")
	calls := 0
	if err := onFreePort(func(int) error { calls++; return bad }); !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("another failure: %v after %d starts, want it at once", err, calls)
	}
	calls = 0
	if err := onFreePort(func(int) error { calls++; return ErrPortTaken }); !errors.Is(err, ErrPortTaken) || calls != portTries {
		t.Fatalf("every port taken: %v after %d starts, want ErrPortTaken after %d", err, calls, portTries)
	}
}
