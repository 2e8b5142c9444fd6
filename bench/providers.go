package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/provider"
)

// Scenario 13e: what a provider kind sends. Real worker processes (2 × 4
// slots, http kind of provider openai) run 2,000 requests of an OpenAI
// Batch API input file (chat completions of varied sizes and shapes:
// system prompts, content parts, unicode, HTML-like text) against the
// strict stand-in of OpenAI's API, which refuses what OpenAI refuses and
// records every request's bytes. Each item's payload is the line's body,
// as provider.Spec.Parse cut it out of the line (what enqueue publishes).
// Bytes sent per item ÷ its body's bytes, and the requests whose bytes
// differ from their line's body at all (must be 0), and refused (400).
var providerBytesScenario = &scenario{
	name:  "providerbytes",
	title: "13e. Provider kinds: the request is the line's body",
	figures: []figSpec{
		{id: "bytes_ratio", name: "bytes the API got per item ÷ the line's body", unit: "ratio", goal: never("<=", 1)},
		{id: "mismatched", name: "requests whose bytes differ from their line's body", unit: "requests", goal: never("<=", 0)},
		{id: "refused", name: "requests the strict stand-in refused (400)", unit: "requests", goal: never("<=", 0)},
	},
	run: runProviderBytes,
}

func runProviderBytes(ctx context.Context, e *env, r runInfo) (*sample, error) {
	smp := newSample()
	n := pick(r.quick, 2000, 300)
	ids := credIDs("p", 2)
	keys := make([]fakeapi.Key, len(ids))
	for i, id := range ids {
		keys[i] = fakeapi.Key{Secret: secretOf(id)}
	}
	api, err := fakeapi.New(fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: keys, Record: true})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	spec, _ := provider.Lookup(provider.OpenAI)
	bodies := map[string]string{}
	payloads := map[string][]byte{}
	for i := range n {
		id := fmt.Sprintf("item-%06d", i)
		line := fmt.Sprintf(`{"custom_id": %q, "method": "POST", "url": "/v1/chat/completions", "body": {"model": "gpt-4o-mini", `+
			`"messages": [{"role": "system", "content": "Answer <b>briefly</b> & clearly."}, {"role": "user", "content": [{"type": "text", "text": "Frage %d: %s"}]}], `+
			`"max_completion_tokens": %d, "temperature": 0.%d}}`, id, i, strings.Repeat("ü→", i%50), 8+i%40, i%10)
		req, err := spec.Parse(provider.FormatOpenAIBatch, provider.CustomID, []byte(line))
		if err != nil {
			return nil, fmt.Errorf("bench: line %d: %w", i, err)
		}
		bodies[string(req.Body)] = id
		payloads[id] = req.Body
	}
	fs := fleetSpec{concurrency: 4, httpURL: srv.URL, provider: provider.OpenAI}
	for _, id := range ids {
		fs.creds = append(fs.creds, credSpec{id: id, max: 4})
	}
	use, _, err := e.runHTTPFleet(ctx, "pbytes", fs, n, 2, "keyfleet: 2 workers, provider openai", func(id string) []byte { return payloads[id] }, nil)
	if err != nil {
		return nil, err
	}
	smp.cpu = append(smp.cpu, use)
	var sent, want, mismatched int64
	seen := map[string]bool{}
	for _, rc := range api.Received() {
		sent += int64(len(rc.Body))
		id, ok := bodies[string(rc.Body)]
		if !ok {
			mismatched++
			continue
		}
		if !seen[id] {
			seen[id] = true
			want += int64(len(payloads[id]))
		}
	}
	if len(seen) != n {
		return nil, fmt.Errorf("bench: the API got %d of the %d requests", len(seen), n)
	}
	smp.values["bytes_ratio"] = float64(sent) / float64(want)
	smp.values["mismatched"] = float64(mismatched)
	smp.values["refused"] = float64(api.Stats().BadRequests)
	return smp, nil
}
