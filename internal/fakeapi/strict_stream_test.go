package fakeapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// event is one server-sent event: its name ("" without an event line) and
// data.
type event struct{ name, data string }

// readEvent reads the next event of a stream; io.EOF at its end.
func readEvent(rd *bufio.Reader) (event, error) {
	var ev event
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && ev == (event{}) {
				return ev, io.EOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, io.ErrUnexpectedEOF
		}
	}
}

// stream posts a streamed request and reads its whole reply.
func stream(t *testing.T, url, body string, hdr ...string) (*http.Response, []event) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
	}
	rd := bufio.NewReader(resp.Body)
	var events []event
	for {
		ev, err := readEvent(rd)
		if err == io.EOF {
			return resp, events
		}
		if err != nil {
			t.Fatalf("reading the stream after %d events: %v", len(events), err)
		}
		events = append(events, ev)
	}
}

// chunk is a chat.completion.chunk as decoded by a client, with the
// fields it carries.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage  *map[string]any `json:"usage"`
	fields map[string]json.RawMessage
}

func chunks(t *testing.T, events []event) []chunk {
	t.Helper()
	if len(events) == 0 || events[len(events)-1] != (event{data: "[DONE]"}) {
		t.Fatalf("the stream does not end with data: [DONE]: %v", events)
	}
	var out []chunk
	for _, ev := range events[:len(events)-1] {
		var c chunk
		if ev.name != "" || json.Unmarshal([]byte(ev.data), &c) != nil || json.Unmarshal([]byte(ev.data), &c.fields) != nil {
			t.Fatalf("not a chunk: %+v", ev)
		}
		out = append(out, c)
	}
	return out
}

// TestStrictStreamOpenAI: a streamed chat completion's chunks, in order,
// with the usage chunk stream_options asks for, the same usage as the
// reply not streamed, and the headers of a reply.
func TestStrictStreamOpenAI(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{
		{Secret: oaKey, Rate: ratelimit.Limit{N: 100, Period: time.Minute}}, {Secret: oaKey2},
	}})
	text := "Count to three [fake:output_tokens=3]" // 37 bytes: 10 tokens
	body := func(extra string) string {
		return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":10` + extra + `}`
	}
	resp, events := stream(t, url+"/v1/chat/completions", body(`,"stream":true,"stream_options":{"include_usage":true}`), openaiAuth(oaKey)...)
	h := resp.Header
	if h.Get("Content-Type") != "text/event-stream; charset=utf-8" || !strings.HasPrefix(h.Get("x-request-id"), "req_") ||
		h.Get("x-ratelimit-limit-requests") != "100" || h.Get("x-ratelimit-remaining-requests") != "99" {
		t.Errorf("headers %v", h)
	}
	cs := chunks(t, events)
	if len(cs) != 6 {
		t.Fatalf("%d chunks, want role, 3 words, finish, usage: %v", len(cs), events)
	}
	var content strings.Builder
	for i, c := range cs {
		if c.Object != "chat.completion.chunk" || c.ID != cs[0].ID || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Model != "gpt-4o-mini" {
			t.Errorf("chunk %d: %s", i, events[i].data)
		}
		if _, ok := c.fields["obfuscation"]; !ok {
			t.Errorf("chunk %d has no obfuscation field: %s", i, events[i].data)
		}
		if i < len(cs)-1 {
			if c.Usage != nil || string(c.fields["usage"]) != "null" || len(c.Choices) != 1 {
				t.Errorf("chunk %d: usage %s, %d choices", i, c.fields["usage"], len(c.Choices))
				continue
			}
			if d := c.Choices[0].Delta; d.Content != nil {
				content.WriteString(*d.Content)
			}
		}
	}
	if r := cs[0].Choices[0].Delta.Role; r == nil || *r != "assistant" || !strings.Contains(events[0].data, `"delta":{"role":"assistant","content":"","refusal":null}`) {
		t.Errorf("first chunk %s", events[0].data)
	}
	if content.String() != "tok tok tok" {
		t.Errorf("content %q", content.String())
	}
	if f := cs[4].Choices[0].FinishReason; f == nil || *f != "stop" || !strings.Contains(events[4].data, `"delta":{}`) {
		t.Errorf("finish chunk %s", events[4].data)
	}
	last := cs[5]
	if len(last.Choices) != 0 || string(last.fields["choices"]) != "[]" || last.Usage == nil ||
		(*last.Usage)["prompt_tokens"] != 10.0 || (*last.Usage)["completion_tokens"] != 3.0 || (*last.Usage)["total_tokens"] != 13.0 {
		t.Errorf("usage chunk %s", events[5].data)
	}

	// Without stream_options: no usage anywhere; without obfuscation: no
	// padding.
	_, events = stream(t, url+"/v1/chat/completions", body(`,"stream":true,"stream_options":{"include_obfuscation":false}`), openaiAuth(oaKey2)...)
	cs = chunks(t, events)
	if len(cs) != 5 {
		t.Fatalf("%d chunks without include_usage: %v", len(cs), events)
	}
	for i, c := range cs {
		if _, ok := c.fields["usage"]; ok {
			t.Errorf("chunk %d has a usage field without include_usage: %s", i, events[i].data)
		}
		if _, ok := c.fields["obfuscation"]; ok {
			t.Errorf("chunk %d has an obfuscation field: %s", i, events[i].data)
		}
	}

	// The same request not streamed reports the same usage.
	r := send(t, "POST", url+"/v1/chat/completions", body(""), openaiAuth(oaKey2)...)
	if !strings.Contains(r.body, `"prompt_tokens":10,"completion_tokens":3,"total_tokens":13`) {
		t.Errorf("not streamed: %s", r.body)
	}
	st := api.Stats()
	if st.Keys[0].Usage.RealTime != (fakeapi.Usage{Requests: 1, InputTokens: 10, OutputTokens: 3}) ||
		st.Keys[1].Usage.RealTime != (fakeapi.Usage{Requests: 2, InputTokens: 20, OutputTokens: 6}) || st.Keys[0].OK != 1 {
		t.Errorf("usage %+v %+v", st.Keys[0], st.Keys[1].Usage)
	}

	// n choices stream side by side, each with its own index.
	_, events = stream(t, url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"x [fake:output_tokens=2]"}],"n":2,"stream":true}`, openaiAuth(oaKey2)...)
	got := map[int]string{}
	for _, c := range chunks(t, events) {
		if d := c.Choices[0].Delta.Content; d != nil {
			got[c.Choices[0].Index] += *d
		}
	}
	if got[0] != "tok tok" || got[1] != "tok tok" {
		t.Errorf("n=2: %v", got)
	}
}

// TestStrictStreamAnthropic: a streamed message's events, in the order and
// shapes of Anthropic's streaming docs, its usage the non-streamed reply's.
func TestStrictStreamAnthropic(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{
		{Secret: anKey, Rate: ratelimit.Limit{N: 50, Period: time.Minute}},
	}})
	body := `{"model":"claude-sonnet-4-6","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"Tell me a story"}]}` // 15 bytes: 4 tokens
	resp, events := stream(t, url+"/v1/messages", body, anthropicAuth(anKey)...)
	h := resp.Header
	if h.Get("Content-Type") != "text/event-stream; charset=utf-8" || !strings.HasPrefix(h.Get("request-id"), "req_") ||
		h.Get("anthropic-ratelimit-requests-limit") != "50" || h.Get("anthropic-ratelimit-requests-remaining") != "49" {
		t.Errorf("headers %v", h)
	}
	var names []string
	for _, ev := range events {
		names = append(names, ev.name)
		var typ struct{ Type string }
		if err := json.Unmarshal([]byte(ev.data), &typ); err != nil || typ.Type != ev.name {
			t.Errorf("event %q: data %s (%v)", ev.name, ev.data, err)
		}
	}
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}
	var start struct {
		Message struct {
			ID, Model, Role string
			Content         []any
			StopReason      *string `json:"stop_reason"`
			Usage           map[string]any
		}
	}
	_ = json.Unmarshal([]byte(events[0].data), &start)
	if m := start.Message; !strings.HasPrefix(m.ID, "msg_") || m.Model != "claude-sonnet-4-6" || m.Role != "assistant" || len(m.Content) != 0 ||
		m.StopReason != nil || m.Usage["input_tokens"] != 4.0 || m.Usage["output_tokens"] != 1.0 {
		t.Errorf("message_start %s", events[0].data)
	}
	var text strings.Builder
	for _, ev := range events[3:6] {
		var d struct {
			Index int
			Delta struct{ Type, Text string }
		}
		_ = json.Unmarshal([]byte(ev.data), &d)
		if d.Index != 0 || d.Delta.Type != "text_delta" {
			t.Errorf("delta %s", ev.data)
		}
		text.WriteString(d.Delta.Text)
	}
	if text.String() != "tok tok tok" {
		t.Errorf("text %q", text.String())
	}
	if events[1].data != `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` ||
		events[6].data != `{"type":"content_block_stop","index":0}` || events[8].data != `{"type":"message_stop"}` {
		t.Errorf("block and stop events %v", events)
	}
	if events[7].data != `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}` {
		t.Errorf("message_delta %s", events[7].data)
	}
	if u := api.Stats().Keys[0]; u.Usage.RealTime != (fakeapi.Usage{Requests: 1, InputTokens: 4, OutputTokens: 3}) || u.OK != 1 {
		t.Errorf("stats %+v", u)
	}
}

// TestStrictStreamArrivesInPieces: the first event of a stream arrives
// while the rest is still to come (here, an hour of latency away): the
// body is sent as it is made, never buffered whole. Leaving early ends
// the request without counting it answered.
func TestStrictStreamArrivesInPieces(t *testing.T) {
	t.Parallel()
	for _, prov := range []string{fakeapi.ProviderOpenAI, fakeapi.ProviderAnthropic} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			api, url := strictServer(t, fakeapi.Config{Provider: prov})
			path, body, auth := "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi [fake:latency=1h]"}]}`, openaiAuth(oaKey)
			if prov == fakeapi.ProviderAnthropic {
				path, body, auth = "/v1/messages", `{"model":"claude-sonnet-4-6","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi [fake:latency=1h]"}]}`, anthropicAuth(anKey)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+path, strings.NewReader(body))
			for i := 0; i+1 < len(auth); i += 2 {
				req.Header.Set(auth[i], auth[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			ev, err := readEvent(bufio.NewReader(resp.Body))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("first event: %d %+v %v", resp.StatusCode, ev, err)
			}
			if first := map[string]string{fakeapi.ProviderOpenAI: "", fakeapi.ProviderAnthropic: "message_start"}[prov]; ev.name != first || ev.data == "" {
				t.Errorf("first event %+v", ev)
			}
			cancel()
			if st := api.Stats().Keys[0]; st.OK != 0 || st.Usage.RealTime.Requests != 0 {
				t.Errorf("a stream left early counted answered: %+v", st)
			}
		})
	}
}

// TestStrictStreamRefusedBeforeItBegins: a request over the key's limits,
// or refused by a marker, gets the provider's JSON error, not a stream.
func TestStrictStreamRefusedBeforeItBegins(t *testing.T) {
	t.Parallel()
	_, oa := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, Keys: []fakeapi.Key{{Secret: oaKey, Rate: ratelimit.Limit{N: 1, Period: time.Hour}}}})
	_, an := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, Keys: []fakeapi.Key{{Secret: anKey, Rate: ratelimit.Limit{N: 1, Period: time.Hour}}}})
	chat := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	msg := `{"model":"claude-sonnet-4-6","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	stream(t, oa+"/v1/chat/completions", chat, openaiAuth(oaKey)...)
	stream(t, an+"/v1/messages", msg, anthropicAuth(anKey)...)
	for _, r := range []answer{
		send(t, "POST", oa+"/v1/chat/completions", chat, openaiAuth(oaKey)...),
		send(t, "POST", an+"/v1/messages", msg, anthropicAuth(anKey)...),
	} {
		if ra, _ := strconv.Atoi(r.header.Get("retry-after")); r.status != 429 || r.header.Get("Content-Type") != "application/json" || ra < 1 || !json.Valid([]byte(r.body)) {
			t.Errorf("over the limit: %d %v %s", r.status, r.header, r.body)
		}
	}
	r := send(t, "POST", an+"/v1/messages", strings.Replace(msg, `"hi"`, `"hi [fake:status=529]"`, 1), anthropicAuth(anKey)...)
	want(t, "529 before the stream", r, 529, anError(r, "overloaded_error", "Overloaded"))
}
