package dashboard_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/dashboard"
)

// A client that sends a request's body slower than the read bound is cut
// off (before, only the headers had a bound: a stalled upload held its
// connection and goroutine for good).
func TestSlowBodyIsCutOff(t *testing.T) {
	defer dashboard.SetTimeouts(500*time.Millisecond, time.Minute)()
	e := newEnv(t)
	base := e.startDashboard(randomSecret("admin-", 16))
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	host := strings.TrimPrefix(base, "http://")
	fmt.Fprintf(conn, "POST /api/batches?kind=sleep&batch=slow HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n{\"id\":", host)
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, _ = io.Copy(io.Discard, conn) // until the server closes the connection
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the stalled upload held its connection for %s", took)
	}
}
