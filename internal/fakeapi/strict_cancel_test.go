package fakeapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// A slow cancel (Config.CancelDelay): an OpenAI batch stays "cancelling"
// after its cancel, its request_counts saying what was done before it,
// and runs nothing more; once the delay is over (SetCancelDelay(0)) it is
// "cancelled" with the requests done before the cancel in its output
// file and the rest in neither file.
func TestOpenAIBatchSlowCancel(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, CancelDelay: time.Hour})
	id := newBatch(t, url, oaKey, chatLine("done", "a", 3), chatLine("held", "b [fake:hold]", 3))
	if b := send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...); !strings.Contains(b.body, `"completed":1,"failed":0`) {
		t.Fatalf("before the cancel: %s", b.body)
	}
	c := send(t, "POST", url+"/v1/batches/"+id+"/cancel", "", openaiAuth(oaKey)...)
	if field[string](t, c, "status") != "cancelling" || field[*int64](t, c, "cancelling_at") == nil {
		t.Fatalf("cancel: %s", c.body)
	}
	// Its other request may run no more, however due.
	slow := newBatch(t, url, oaKey, chatLine("s1", "a", 3))
	api.SetBatchDelay(time.Hour)
	send(t, "GET", url+"/v1/batches/"+slow, "", openaiAuth(oaKey)...) // validating → in_progress, nothing due
	send(t, "POST", url+"/v1/batches/"+slow+"/cancel", "", openaiAuth(oaKey)...)
	api.SetBatchDelay(0)
	for range 3 {
		for _, b := range []string{id, slow} {
			g := send(t, "GET", url+"/v1/batches/"+b, "", openaiAuth(oaKey)...)
			if field[string](t, g, "status") != "cancelling" || field[*string](t, g, "output_file_id") != nil || field[*int64](t, g, "cancelled_at") != nil {
				t.Fatalf("still within the cancel delay: %s", g.body)
			}
		}
	}
	if g := send(t, "GET", url+"/v1/batches/"+slow, "", openaiAuth(oaKey)...); !strings.Contains(g.body, `"request_counts":{"total":1,"completed":0,"failed":0}`) {
		t.Errorf("a request ran while its batch was cancelling: %s", g.body)
	}
	api.SetCancelDelay(0)
	g := send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
	if field[string](t, g, "status") != "cancelled" || field[*int64](t, g, "cancelled_at") == nil || field[*string](t, g, "error_file_id") != nil ||
		!strings.Contains(g.body, `"request_counts":{"total":2,"completed":1,"failed":0}`) {
		t.Fatalf("cancelled: %s", g.body)
	}
	if out := content(t, url, oaKey, field[string](t, g, "output_file_id")); len(out) != 1 || out[0]["custom_id"] != "done" {
		t.Errorf("output %v", out)
	}
	if g := send(t, "GET", url+"/v1/batches/"+slow, "", openaiAuth(oaKey)...); field[string](t, g, "status") != "cancelled" || field[*string](t, g, "output_file_id") != nil {
		t.Errorf("cancelled with nothing done: %s", g.body)
	}
}

// A slow cancel of an Anthropic message batch: it stays "canceling"
// (every request counted processing, results_url null, results not
// found) and runs nothing more; once the delay is over it is "ended", the
// request done before the cancel succeeded and the other canceled.
func TestAnthropicBatchSlowCancel(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, CancelDelay: time.Hour})
	id := field[string](t, newMessageBatch(t, url, anKey, mbRequest("done", "a", 2), mbRequest("held", "b [fake:hold]", 2)), "id")
	send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...) // runs "done"
	c := send(t, "POST", url+"/v1/messages/batches/"+id+"/cancel", "", anthropicAuth(anKey)...)
	if field[string](t, c, "processing_status") != "canceling" || field[*string](t, c, "cancel_initiated_at") == nil {
		t.Fatalf("cancel: %s", c.body)
	}
	for range 3 {
		g := send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...)
		if field[string](t, g, "processing_status") != "canceling" || field[*string](t, g, "ended_at") != nil ||
			field[*string](t, g, "results_url") != nil || !strings.Contains(g.body, `"processing":2`) {
			t.Fatalf("still within the cancel delay: %s", g.body)
		}
	}
	if r := send(t, "GET", url+"/v1/messages/batches/"+id+"/results", "", anthropicAuth(anKey)...); r.status != 404 {
		t.Errorf("results while canceling: %d %s", r.status, r.body)
	}
	api.SetCancelDelay(0)
	g := send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...)
	if field[string](t, g, "processing_status") != "ended" || !strings.Contains(g.body, `"request_counts":{"processing":0,"succeeded":1,"errored":0,"canceled":1,"expired":0}`) {
		t.Fatalf("ended: %s", g.body)
	}
	res := send(t, "GET", field[string](t, g, "results_url"), "", anthropicAuth(anKey)...)
	lines := strings.Split(strings.TrimSpace(res.body), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"custom_id":"done","result":{"type":"succeeded"`) ||
		lines[1] != `{"custom_id":"held","result":{"type":"canceled"}}` {
		t.Errorf("results %s", res.body)
	}
}

// A negative cancel delay is refused, naming it.
func TestCancelDelayMustNotBeNegative(t *testing.T) {
	_, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, CancelDelay: -time.Second, Keys: []fakeapi.Key{{Secret: oaKey}}})
	if err == nil || !strings.Contains(err.Error(), "cancel delay must not be negative") {
		t.Errorf("New: %v, want the cancel delay named", err)
	}
}
