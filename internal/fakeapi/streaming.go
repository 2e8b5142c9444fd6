package fakeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// streamContentType is a streamed reply's Content-Type, as both APIs
// send it: api.openai.com's streamed chat completions (recorded in
// github.com/charmbracelet/fantasy, providertests/testdata/TestOpenAICommon/
// openai-o4-mini/simple_streaming.yaml) and api.anthropic.com's streamed
// messages (github.com/RavenStorm-bit/claude-code-api-logger,
// responses-analysis-clean.md).
const streamContentType = "text/event-stream; charset=utf-8"

// parseStream reads "stream" (a boolean, type-checked already) and
// OpenAI's "stream_options" ({include_usage, include_obfuscation}, both
// booleans), refused without "stream": true as OpenAI refuses it: 400
// invalid_request_error "The 'stream_options' parameter is only allowed
// when 'stream' is enabled." with param stream_options and code null (the
// API's reply as quoted in github.com/BerriAI/litellm/issues/5803 and
// github.com/lobehub/lobehub/issues/6735). A null stream_options is no
// stream_options, as OpenAI takes null for an optional field.
func (st *strictState) parseStream(q *query, fields map[string]json.RawMessage) *apiError {
	q.stream = string(bytes.TrimSpace(fields["stream"])) == "true"
	raw, ok := fields["stream_options"]
	if !ok || kindOf(raw) == kindNull {
		return nil
	}
	if !q.stream {
		return invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", "")
	}
	var opts map[string]json.RawMessage
	_ = json.Unmarshal(raw, &opts) // an object: checkKinds saw to it
	q.obfuscate = true
	for _, name := range []string{"include_usage", "include_obfuscation"} {
		v, ok := opts[name]
		if !ok || kindOf(v) == kindNull {
			continue
		}
		if k := kindOf(v); k != kindBool {
			return st.wrongType("stream_options."+name, []jsonKind{kindBool}, k)
		}
		on := string(bytes.TrimSpace(v)) == "true"
		if name == "include_usage" {
			q.includeUsage = on
		} else {
			q.obfuscate = on
		}
	}
	return nil
}

// sseEvent is one server-sent event of a streamed reply: its name
// (Anthropic's "event:" line; OpenAI's events have none) and data. A
// paced event waits its share of the request's latency before it is
// sent.
type sseEvent struct {
	name  string
	data  []byte
	paced bool
}

// streamReply sends q's reply as the provider streams it, one event per
// write and flush: the opening events at once, then each word of the
// reply and the closing events spread evenly over d, the request's
// latency, so that the first event arrives well before the last. done is
// called just before the last event is sent (the usage is then known to
// the client's reader). false: the client went away, or a write failed.
func (c *call) streamReply(q *query, d time.Duration, done func()) bool {
	var events []sseEvent
	if c.st.openai() {
		events = c.st.chatChunks(q)
	} else {
		events = c.st.messageEvents(q)
	}
	paced := 0
	for _, ev := range events {
		if ev.paced {
			paced++
		}
	}
	var step time.Duration
	if paced > 0 {
		step = d / time.Duration(paced)
	}
	c.w.Header().Set("Content-Type", streamContentType)
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	var buf bytes.Buffer
	for i, ev := range events {
		if ev.paced && !sleep(c.r.Context(), step) {
			return false
		}
		if i == len(events)-1 {
			done()
		}
		buf.Reset()
		if ev.name != "" {
			buf.WriteString("event: " + ev.name + "\n")
		}
		buf.WriteString("data: ")
		buf.Write(ev.data)
		buf.WriteString("\n\n")
		if _, err := c.w.Write(buf.Bytes()); err != nil {
			return false
		}
		if err := rc.Flush(); err != nil {
			return false
		}
	}
	return true
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// words are a reply's text of n output tokens as its deltas: "tok", then
// " tok" for each further token (outputText is their concatenation).
func words(n int64) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = " tok"
	}
	if n > 0 {
		out[0] = "tok"
	}
	return out
}

// chatChunks are a streamed chat completion (openai-openapi
// CreateChatCompletionStreamResponse; openai-node 6.49.0
// ChatCompletionChunk) in the order and shape api.openai.com sends them
// (recorded in github.com/charmbracelet/fantasy,
// providertests/testdata/TestOpenAICommon/openai-o4-mini/simple_streaming.yaml:
// `{"id":"chatcmpl-CRdz…","object":"chat.completion.chunk","created":…,
// "model":…,"service_tier":"default","system_fingerprint":null,"choices":
// [{"index":0,"delta":{"content":"Oi"},"finish_reason":null}],"usage":null,
// "obfuscation":"RHZ9L7BA"}`; gpt models' choices also carry
// "logprobs":null): per choice a first chunk with the role (delta
// {"role":"assistant","content":"","refusal":null}), one chunk per word, a
// last chunk with an empty delta and the finish_reason; with include_usage
// one more chunk whose choices are empty and whose usage is the request's
// ("If set, an additional chunk will be streamed before the data: [DONE]
// message. The usage field on this chunk shows the token usage statistics
// for the entire request, and the choices field will always be an empty
// array. All other chunks will also include a usage field, but with a null
// value": openai-openapi ChatCompletionStreamOptions; without it no chunk
// has a usage field); then "data: [DONE]". Each chunk carries an
// obfuscation field of random characters unless include_obfuscation is
// false ("Stream obfuscation adds random characters to an obfuscation
// field on streaming delta events to normalize payload sizes": the same
// schema).
func (st *strictState) chatChunks(q *query) []sseEvent {
	id, created := st.nextID("chatcmpl-"), time.Now().Unix()
	finish := "stop"
	if q.max >= 0 && q.out == q.max {
		finish = "length"
	}
	type choice struct {
		Index        int     `json:"index"`
		Delta        any     `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	chunk := func(choices []choice, usage any, content string) []byte {
		fields := []kv{
			{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", q.model},
			{"service_tier", "default"}, {"system_fingerprint", nil}, {"choices", choices},
		}
		if q.includeUsage {
			fields = append(fields, kv{"usage", usage})
		}
		if q.obfuscate {
			fields = append(fields, kv{"obfuscation", obfuscation(content)})
		}
		return marshalObject(fields)
	}
	type roleDelta struct {
		Role    string `json:"role"`
		Content string `json:"content"`
		Refusal any    `json:"refusal"`
	}
	type contentDelta struct {
		Content string `json:"content"`
	}
	ws := words(q.out)
	var events []sseEvent
	for i := range q.n {
		events = append(events, sseEvent{data: chunk([]choice{{Index: i, Delta: roleDelta{Role: "assistant"}}}, nil, "")})
	}
	for _, w := range ws {
		for i := range q.n {
			events = append(events, sseEvent{paced: i == 0, data: chunk([]choice{{Index: i, Delta: contentDelta{w}}}, nil, w)})
		}
	}
	for i := range q.n {
		events = append(events, sseEvent{paced: i == 0, data: chunk([]choice{{Index: i, Delta: struct{}{}, FinishReason: &finish}}, nil, "")})
	}
	if q.includeUsage {
		out := q.out * int64(q.n)
		events = append(events, sseEvent{data: chunk([]choice{}, chatUsage{PromptTokens: q.input, CompletionTokens: out, TotalTokens: q.input + out}, "")})
	}
	return append(events, sseEvent{data: []byte("[DONE]")})
}

// obfuscation is a chunk's padding: random letters and digits, so that
// the content and its padding are about 16 bytes together.
func obfuscation(content string) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, max(1, 16-len(content)))
	for i := range b {
		b[i] = chars[rand.IntN(len(chars))]
	}
	return string(b)
}

// messageEvents are a streamed Messages API reply
// (docs.anthropic.com/en/docs/build-with-claude/streaming, "Event types":
// "message_start: contains a Message object with empty content. A series
// of content blocks, each of which have a content_block_start, one or more
// content_block_delta events, and a content_block_stop event. ... One or
// more message_delta events ... A final message_stop event. The token
// counts shown in the usage field of the message_delta event are
// cumulative."), each "event: <type>\ndata: <json>" with a ping after the
// first block's start as the API sends it (its "Full HTTP Stream
// response"; the ping's data written as the API writes it, `{"type":
// "ping"}`). message_start's usage has the input tokens and one output
// token (the API's running count at the start); message_delta's the whole
// reply's, as the non-streamed reply's usage says them.
func (st *strictState) messageEvents(q *query) []sseEvent {
	stop := "end_turn"
	if q.out == q.max {
		stop = "max_tokens"
	}
	ev := func(fields ...kv) sseEvent {
		return sseEvent{name: fields[0].value.(string), data: marshalObject(fields)}
	}
	type block struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	usage := func(out int64, tier bool) []kv {
		u := []kv{{"input_tokens", q.input}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}, {"output_tokens", out}}
		if tier {
			u = append(u, kv{"service_tier", "standard"})
		}
		return u
	}
	message := []kv{
		{"id", st.nextID("msg_")}, {"type", "message"}, {"role", "assistant"}, {"content", []block{}},
		{"model", q.model}, {"stop_reason", nil}, {"stop_sequence", nil}, {"usage", object(usage(min(q.out, 1), true))},
	}
	events := []sseEvent{
		ev(kv{"type", "message_start"}, kv{"message", object(message)}),
		ev(kv{"type", "content_block_start"}, kv{"index", 0}, kv{"content_block", block{Type: "text"}}),
		{name: "ping", data: []byte(`{"type": "ping"}`)},
	}
	for _, w := range words(q.out) {
		e := ev(kv{"type", "content_block_delta"}, kv{"index", 0}, kv{"delta", block{Type: "text_delta", Text: w}})
		e.paced = true
		events = append(events, e)
	}
	blockStop := ev(kv{"type", "content_block_stop"}, kv{"index", 0})
	blockStop.paced = true
	return append(events, blockStop,
		ev(kv{"type", "message_delta"}, kv{"delta", object([]kv{{"stop_reason", stop}, {"stop_sequence", nil}})},
			kv{"usage", object(usage(q.out, false))}),
		ev(kv{"type", "message_stop"}))
}

// kv is one field of a JSON object written in a fixed order.
type kv struct {
	key   string
	value any
}

// object is a JSON object whose fields keep their order.
type object []kv

func (o object) MarshalJSON() ([]byte, error) { return marshalObject(o), nil }

// marshalObject writes fields as one JSON object, in their order.
func marshalObject(fields []kv) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(marshal(f.key))
		b.WriteByte(':')
		b.Write(marshal(f.value))
	}
	b.WriteByte('}')
	return []byte(b.String())
}
