package fakeapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// TestBatchBounds: OpenAI's 50,000 requests and 200 MB a batch file,
// Anthropic's 100,000 requests and 256 MB a batch, here lowered to 3
// requests and a few hundred bytes. Not parallel: it changes the bounds.
func TestBatchBounds(t *testing.T) {
	defer fakeapi.SetBoundsForTest(3, 2000, 3, 600)()

	_, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	id := newBatch(t, oa, oaKey, chatLine("a", "1", 1), chatLine("b", "2", 1), chatLine("c", "3", 1), chatLine("d", "4", 1))
	b := send(t, "GET", oa+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "failed" || !strings.Contains(b.body, `"data":[{"code":"too_many_tasks","message":"The batch input file has 4 requests; a batch can have at most 3.","param":null,"line":null}]`) {
		t.Errorf("too many requests: %s", b.body)
	}
	big := strings.Repeat(chatLine("x", strings.Repeat("y", 1000), 1)+"\n", 3)
	want(t, "file too large", upload(t, oa, oaKey, "big.jsonl", "batch", big), 400,
		oaError(fmt.Sprintf("File is too large for the Batch API: %d bytes, the maximum is 2000 bytes (200 MB).", len(big)), "invalid_request_error", "file", ""))
	if r := upload(t, oa, oaKey, "big.jsonl", "user_data", big); r.status != 200 {
		t.Errorf("the bound is the Batch API's: %d %s", r.status, r.body)
	}

	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	four := `{"requests":[` + strings.Join([]string{mbRequest("a", "1", 1), mbRequest("b", "2", 1), mbRequest("c", "3", 1), mbRequest("d", "4", 1)}, ",") + `]}`
	r := send(t, "POST", an+"/v1/messages/batches", four, anthropicAuth(anKey)...)
	want(t, "too many requests", r, 400, anError(r, "invalid_request_error", "requests: List should have at most 3 items after validation, not 4"))
	huge := `{"requests":[` + mbRequest("a", strings.Repeat("z", 600), 1) + `]}`
	r = send(t, "POST", an+"/v1/messages/batches", huge, anthropicAuth(anKey)...)
	want(t, "too large", r, 413, anError(r, "request_too_large", "Request exceeds the maximum allowed number of bytes."))
}
