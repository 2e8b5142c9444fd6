package provider_test

import (
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/provider"
)

// Streams as the providers send them (the shapes fakeapi's strict mode
// streams, from the providers' recordings), fed whole, a byte at a time
// and in uneven pieces: the usage is the same however they arrive.
func TestStreamUsage(t *testing.T) {
	openaiChunk := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}],"usage":null}`
	tests := []struct {
		name   string
		stream string
		want   provider.Usage
		ok     bool
	}{
		{
			name: "openai with include_usage: the last chunk's usage",
			stream: "data: " + openaiChunk + "\n\n" + "data: " + openaiChunk + "\n\n" +
				`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}` + "\n\n" +
				"data: [DONE]\n\n",
			want: provider.Usage{Input: 12, Output: 30, Total: 42}, ok: true,
		},
		{
			name:   "openai without include_usage: none",
			stream: "data: " + openaiChunk + "\n\ndata: [DONE]\n\n",
		},
		{
			name: "anthropic: message_start's input, the last message_delta's output",
			stream: "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-6\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\": {\"output_tokens\":17}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			want: provider.Usage{Input: 25, Output: 17, Total: 42}, ok: true,
		},
		{
			name:   "anthropic cut before its message_delta: no output count, no usage",
			stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
		},
		{
			name: "responses: response.completed's usage, not the earlier nulls",
			stream: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":9,\"output_tokens\":4,\"total_tokens\":13}}}",
			want: provider.Usage{Input: 9, Output: 4, Total: 13}, ok: true,
		},
		{
			name:   "a data line over the bound is passed over; the usage after it counts",
			stream: "data: " + strings.Repeat("x", 300<<10) + "\n\n" + `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}` + "\n\n",
			want:   provider.Usage{Input: 1, Output: 2, Total: 3}, ok: true,
		},
	}
	for _, tt := range tests {
		for _, piece := range []int{len(tt.stream), 1, 7, 4096} {
			var s provider.StreamUsage
			for rest := tt.stream; rest != ""; {
				n := min(piece, len(rest))
				if n == 0 {
					n = len(rest)
				}
				if w, err := s.Write([]byte(rest[:n])); w != n || err != nil {
					t.Fatalf("%s: Write = %d, %v", tt.name, w, err)
				}
				rest = rest[n:]
			}
			_ = s.Close()
			got, ok := s.Usage()
			if ok != tt.ok || got != tt.want {
				t.Errorf("%s (pieces of %d): usage %+v %v, want %+v %v", tt.name, piece, got, ok, tt.want, tt.ok)
			}
		}
	}
}
