package dashboard_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// The workers' table shows the gateway's traffic beside the batches'
// slots: a worker serving the gateway announces its figures in its
// heartbeat, and the page shows them in its row and in the summary.
func TestDashboardShowsGatewayTraffic(t *testing.T) {
	e := newEnv(t)
	host, _ := os.Hostname()
	now := time.Now()
	for _, w := range []queue.WorkerInfo{
		{ID: "gw-1", Host: host, State: "running", Concurrency: 4, Busy: 1, Kinds: []string{"chat"}, StartedAt: now, LastSeen: now,
			Gateway: &queue.GatewayInfo{Listen: "127.0.0.1:8090", Requests: 1234, Errors: 5, InFlight: 3}},
		{ID: "batch-only", Host: host, State: "running", Concurrency: 4, Kinds: []string{"chat"}, StartedAt: now, LastSeen: now},
	} {
		if err := e.q.Announce(e.ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	base := e.startDashboard("")
	ctx := newBrowser(t, e.ctx)
	run(t, ctx, "opening the dashboard", chromedp.Navigate(base+"/"))
	until(t, ctx, "the gateway worker's row", `!!document.querySelector('tr[data-worker="gw-1"][data-gateway="1234"]')`, 30*time.Second)
	var row, other, summary string
	run(t, ctx, "reading the workers", textOf(`tr[data-worker="gw-1"] td.gateway`, &row), textOf(`tr[data-worker="batch-only"]`, &other),
		textOf(`#workers-summary`, &summary))
	if !strings.Contains(row, "3 now · 1,234") || !strings.Contains(row, "5 errors") {
		t.Errorf("the gateway cell: %q, want its in-flight, answered and error counts", row)
	}
	if !strings.Contains(summary, "gateway: 3 in flight, 1,234 answered") {
		t.Errorf("the workers' summary: %q", summary)
	}
	if strings.Contains(other, "now ·") {
		t.Errorf("a worker without the gateway shows gateway figures: %q", other)
	}
}
