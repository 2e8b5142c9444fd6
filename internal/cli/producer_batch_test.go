package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/testutil/natstest"
)

// enqueue writes the batch's record: a batch enqueued in several runs adds
// up its new items, and duplicates count once.
func TestEnqueueRecordsBatchTotal(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, srv.URL(), "BATCHREC")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("first.jsonl", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n")
	second := write("second.jsonl", "{\"id\":\"b\"}\n{\"id\":\"c\"}\n{\"id\":\"d\"}\n{\"id\":\"e\"}\n")
	for _, f := range []string{first, first, second, second} {
		var out, errb bytes.Buffer
		code := ProducerMain([]string{"--config", cfg, "enqueue", "--kind", "sleep", "--batch", "run-1", f}, strings.NewReader(""), &out, &errb)
		if code != 0 || strings.Contains(errb.String(), "warning") {
			t.Fatalf("enqueue %s: exit %d\n%s%s", f, code, out.String(), errb.String())
		}
	}

	ctx, q := testQueue(t, srv.URL(), "BATCHREC", queue.Attach)
	bs, err := q.Batches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].ID != "run-1" || bs[0].Total != 5 || bs[0].Kinds.String() != "sleep" {
		t.Fatalf("want one batch run-1 of 5 sleep items (a..e), got %+v", bs)
	}
}
