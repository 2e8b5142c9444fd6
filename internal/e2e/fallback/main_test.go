package fallback

import (
	"testing"

	"github.com/keyfleet/keyfleet/internal/e2e/e2etest"
)

// TestMain builds the binaries (shared by the e2e packages) and prints the
// reliability table of this package's rows at the end.
func TestMain(m *testing.M) { e2etest.Main(m) }
