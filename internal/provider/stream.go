package provider

import (
	"bytes"
	"encoding/json"
)

// StreamUsage reads what a streamed reply (server-sent events, "stream":
// true) says it used, from its bytes as they pass (Write), in whatever
// pieces they come:
//
//   - OpenAI's chat completions (and completions) with
//     stream_options.include_usage: the last chunk before "data: [DONE]"
//     has the usage of the whole request ({"usage": {"prompt_tokens",
//     "completion_tokens", "total_tokens"}}; the other chunks have
//     "usage": null, or none);
//   - OpenAI's Responses API: the response.completed event's
//     response.usage ({"input_tokens", "output_tokens", "total_tokens"});
//   - Anthropic's messages: message_start's message.usage.input_tokens,
//     and the last message_delta's usage.output_tokens (cumulative; a
//     message_delta that also counts input_tokens replaces the start's).
//
// Only events that hold a usage object are decoded. A line longer than
// streamLineMax is passed over. Not safe for concurrent use.
type StreamUsage struct {
	line    []byte // the current line, while it is not complete
	long    bool   // the current line outgrew streamLineMax: skipped
	data    []byte // the current event's data lines, joined with '\n'
	in, out int64
	total   int64
	seenIn  bool
	seenOut bool
}

// streamLineMax bounds the line StreamUsage keeps: a usage event is a few
// hundred bytes, a content delta may be anything.
const streamLineMax = 256 << 10

// Write reads p, the next bytes of the stream. It never fails.
func (s *StreamUsage) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.keep(p)
			break
		}
		s.keep(p[:i])
		s.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// keep adds b to the current line, unless that makes it too long.
func (s *StreamUsage) keep(b []byte) {
	if s.long {
		return
	}
	if len(s.line)+len(b) > streamLineMax {
		s.long, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

// endLine takes a complete line: a data line is kept for its event, a
// blank line ends the event.
func (s *StreamUsage) endLine() {
	line := bytes.TrimSuffix(s.line, []byte{'\r'})
	long := s.long
	s.line, s.long = s.line[:0], false
	switch {
	case long:
	case len(line) == 0:
		s.event(s.data)
		s.data = s.data[:0]
	case bytes.HasPrefix(line, []byte("data:")):
		v := bytes.TrimPrefix(line[len("data:"):], []byte{' '})
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, v...)
	}
}

// Close ends the stream: an event not followed by a blank line counts.
func (s *StreamUsage) Close() error {
	if len(s.line) > 0 {
		s.endLine()
	}
	s.event(s.data)
	s.data = s.data[:0]
	return nil
}

// event reads one event's data.
func (s *StreamUsage) event(data []byte) {
	if !hasUsageObject(data) {
		return
	}
	var e struct {
		Type    string          `json:"type"`
		Usage   json.RawMessage `json:"usage"`
		Message *struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"message"`
		Response *struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &e) != nil {
		return
	}
	var raw json.RawMessage
	switch {
	case e.Type == "message_start" && e.Message != nil:
		raw = e.Message.Usage
	case e.Response != nil && len(e.Response.Usage) > 0:
		raw = e.Response.Usage
	default:
		raw = e.Usage
	}
	if len(raw) == 0 || raw[0] != '{' {
		return
	}
	var u struct {
		Prompt     *float64 `json:"prompt_tokens"`
		Completion *float64 `json:"completion_tokens"`
		Total      *float64 `json:"total_tokens"`
		Input      *float64 `json:"input_tokens"`
		Output     *float64 `json:"output_tokens"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return
	}
	in, out := u.Prompt, u.Completion
	if in == nil && out == nil {
		in, out = u.Input, u.Output
	}
	if e.Type == "message_start" {
		out = nil // Anthropic's opening count of output is not its total
	}
	if in != nil {
		s.in, s.seenIn = tokens(*in), true
	}
	if out != nil {
		s.out, s.seenOut = tokens(*out), true
	}
	if u.Total != nil {
		s.total = tokens(*u.Total)
	}
}

// Usage is what the stream said it used, and whether it said so: its
// output tokens at least (an Anthropic stream cut before its
// message_delta said only what it read).
func (s *StreamUsage) Usage() (Usage, bool) {
	if !s.seenOut {
		return Usage{}, false
	}
	u := Usage{Input: s.in, Output: s.out, Total: s.in + s.out}
	if s.total > 0 {
		u.Total = s.total
	}
	return u, true
}

// hasUsageObject reports whether an event's data holds "usage" followed
// by an object (not null): the events worth decoding.
func hasUsageObject(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`"usage"`))
		if i < 0 {
			return false
		}
		data = data[i+len(`"usage"`):]
		rest := bytes.TrimLeft(data, " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			rest = bytes.TrimLeft(rest[1:], " \t\r\n")
			if len(rest) > 0 && rest[0] == '{' {
				return true
			}
		}
	}
}

// tokens turns a count read from JSON into whole tokens (0 when it is
// not one).
func tokens(f float64) int64 {
	if f < 0 || f > 1<<50 || f != f {
		return 0
	}
	n := int64(f)
	if float64(n) < f {
		n++
	}
	return n
}
