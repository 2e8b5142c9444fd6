package fakeapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// endpoint is one of the strict mode's inference endpoints.
type endpoint string

const (
	endpointChat       endpoint = "/v1/chat/completions"
	endpointEmbeddings endpoint = "/v1/embeddings"
	endpointMessages   endpoint = "/v1/messages"
	endpointResponses  endpoint = "/v1/responses"
)

// Known top-level request fields, from each API's reference. A field not
// listed is refused as the API refuses it.
var knownFields = map[endpoint][]string{
	// openai-openapi (github.com/openai/openai-openapi, openapi.yaml at
	// f85dbe2): components.schemas.CreateChatCompletionRequest with its
	// allOf CreateModelResponseProperties / ModelResponseProperties;
	// checked against openai-node 6.49.0 ChatCompletionCreateParamsBase.
	endpointChat: {
		"audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
		"max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model",
		"moderation", "n", "parallel_tool_calls", "prediction", "presence_penalty",
		"prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
		"response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
		"stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
		"verbosity", "web_search_options",
	},
	// openai-node 6.49.0 ResponseCreateParamsBase (responses.go).
	endpointResponses: {
		"background", "context_management", "conversation", "include", "input", "instructions",
		"max_output_tokens", "metadata", "model", "moderation", "parallel_tool_calls",
		"previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options",
		"prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store", "stream",
		"stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
		"truncation", "user",
	},
	// openai-openapi components.schemas.CreateEmbeddingRequest
	// (additionalProperties: false).
	endpointEmbeddings: {"dimensions", "encoding_format", "input", "model", "user"},
	// anthropic-sdk-go message.go MessageNewParams (b43f0d7) and
	// @anthropic-ai/sdk 0.137.0 MessageCreateParamsBase (less
	// user_profile_id and workspace_id, which the SDK sends as headers),
	// plus "stream".
	endpointMessages: {
		"cache_control", "container", "diagnostics", "inference_geo", "max_tokens", "messages",
		"metadata", "model", "output_config", "service_tier", "speed", "stop_sequences", "stream",
		"system", "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p",
	},
}

// jsonKind is a JSON value's kind as the validators name it.
type jsonKind int

const (
	kindNull jsonKind = iota
	kindString
	kindInteger
	kindNumber // a number with a fraction or exponent
	kindBool
	kindArray
	kindObject
)

func kindOf(raw json.RawMessage) jsonKind {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return kindNull
	}
	switch raw[0] {
	case '"':
		return kindString
	case '[':
		return kindArray
	case '{':
		return kindObject
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	}
	if bytes.ContainsAny(raw, ".eE") {
		return kindNumber
	}
	return kindInteger
}

// openaiKind names a kind as OpenAI's messages do ("a string", "an
// integer"); anthropicKind as Anthropic's do ("a valid string").
func openaiKind(k jsonKind) string {
	return [...]string{"null", "a string", "an integer", "a number", "a boolean", "an array", "an object"}[k]
}

func anthropicKind(k jsonKind) string {
	return [...]string{"null", "a valid string", "a valid integer", "a valid number", "a valid boolean", "a valid list", "a valid dictionary"}[k]
}

// fieldKinds are the kinds a field may have (besides null, where the API
// allows it); fields not listed are not type-checked.
var fieldKinds = map[endpoint]map[string][]jsonKind{
	endpointChat: {
		"model": {kindString}, "messages": {kindArray},
		"max_tokens": {kindInteger}, "max_completion_tokens": {kindInteger}, "n": {kindInteger},
		"seed": {kindInteger}, "top_logprobs": {kindInteger},
		"temperature": {kindNumber, kindInteger}, "top_p": {kindNumber, kindInteger},
		"frequency_penalty": {kindNumber, kindInteger}, "presence_penalty": {kindNumber, kindInteger},
		"stream": {kindBool}, "store": {kindBool}, "logprobs": {kindBool}, "parallel_tool_calls": {kindBool},
		"metadata": {kindObject}, "logit_bias": {kindObject}, "response_format": {kindObject},
		"stream_options": {kindObject}, "tools": {kindArray}, "functions": {kindArray},
		"stop": {kindString, kindArray}, "user": {kindString}, "service_tier": {kindString},
	},
	endpointEmbeddings: {
		"model": {kindString}, "input": {kindString, kindArray}, "encoding_format": {kindString},
		"dimensions": {kindInteger}, "user": {kindString},
	},
	endpointResponses: {
		"model": {kindString}, "input": {kindString, kindArray}, "instructions": {kindString},
		"max_output_tokens": {kindInteger}, "stream": {kindBool}, "stream_options": {kindObject},
		"store": {kindBool}, "background": {kindBool}, "parallel_tool_calls": {kindBool},
		"temperature": {kindNumber, kindInteger}, "top_p": {kindNumber, kindInteger},
		"metadata": {kindObject}, "tools": {kindArray}, "user": {kindString}, "service_tier": {kindString},
	},
	endpointMessages: {
		"model": {kindString}, "messages": {kindArray}, "max_tokens": {kindInteger},
		"system": {kindString, kindArray}, "stop_sequences": {kindArray}, "stream": {kindBool},
		"temperature": {kindNumber, kindInteger}, "top_p": {kindNumber, kindInteger}, "top_k": {kindInteger},
		"metadata": {kindObject}, "tools": {kindArray}, "tool_choice": {kindObject}, "thinking": {kindObject},
		"service_tier": {kindString},
	},
}

// required are each endpoint's required fields, in the order they are
// checked: openai-openapi CreateChatCompletionRequest required [model,
// messages], CreateEmbeddingRequest [model, input]; anthropic-sdk-go
// MessageNewParams "The properties MaxTokens, Messages, Model are
// required."
var required = map[endpoint][]string{
	endpointChat:       {"model", "messages"},
	endpointEmbeddings: {"model", "input"},
	endpointMessages:   {"max_tokens", "messages", "model"},
	endpointResponses:  {"model"},
}

// query is one validated inference request.
type query struct {
	ep     endpoint
	model  string
	input  int64 // input tokens
	max    int64 // max_tokens / max_completion_tokens; -1: none
	n      int   // chat choices
	out    int64 // output tokens of each choice
	texts  []string
	tokens [][]int64 // embeddings given as token arrays
	dims   int
	base64 bool
	marks  marks
	// A streamed reply (real time only; streaming.go): usage in its final
	// chunk (OpenAI stream_options.include_usage), obfuscation fields on
	// its chunks (OpenAI stream_options.include_obfuscation, on unless
	// false).
	stream, includeUsage, obfuscate bool
	// instructions are a Responses API request's, echoed by its reply
	// (nil: none).
	instructions any
}

// objectFields decodes a JSON object's top-level fields, in their order.
func objectFields(body []byte) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var names []string
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, err
		}
		if _, dup := fields[name]; !dup {
			names = append(names, name)
		}
		fields[name] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return nil, nil, fmt.Errorf("data after the JSON object")
	}
	return names, fields, nil
}

// badJSON is the provider's answer to a body that is not a JSON object.
func (st *strictState) badJSON() *apiError {
	if st.openai() {
		// The API's words for a body it cannot parse.
		return invalid("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)", "", "")
	}
	return invalid("There was an error parsing the body of your request: it is not a valid JSON object.", "", "")
}

// unknownField refuses fields the endpoint does not know, in the
// provider's words: OpenAI "Unrecognized request argument supplied: id"
// (400, param and code null), Anthropic "id: Extra inputs are not
// permitted" (400 invalid_request_error), the first unknown field by its
// place in the body.
func (st *strictState) unknownField(prefix string, names []string) *apiError {
	var unknown []string
	for _, n := range names {
		if !slicesContains(knownFields[endpoint(prefix)], n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	if endpoint(prefix) == endpointResponses {
		return unknownParameter(unknown[0])
	}
	if st.openai() {
		if len(unknown) == 1 {
			return invalid("Unrecognized request argument supplied: "+unknown[0], "", "")
		}
		return invalid("Unrecognized request arguments supplied: "+strings.Join(unknown, ", "), "", "")
	}
	return invalid(unknown[0]+": Extra inputs are not permitted", "", "")
}

func slicesContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// missing is the provider's refusal of a missing required field: OpenAI
// "Missing required parameter: 'messages[2].content[0].type'." with code
// missing_required_parameter (quoted in
// github.com/neuron-core/neuron-ai/issues/292), Anthropic "max_tokens:
// Field required" (quoted with its request_id in
// github.com/tickernelz/opencode-mem/issues/50).
func (st *strictState) missing(path string) *apiError {
	if st.openai() {
		return invalid(fmt.Sprintf("Missing required parameter: '%s'.", path), path, "missing_required_parameter")
	}
	return invalid(path+": Field required", "", "")
}

// wrongType is the provider's refusal of a field of the wrong kind: OpenAI
// "Invalid type for 'messages[0].content': expected a string, but got an
// array instead." with code invalid_type (quoted in
// github.com/danny-avila/LibreChat/issues/3111), Anthropic "<path>: Input
// should be a valid integer" (quoted in
// github.com/valentinfrlch/ha-llmvision/issues/695).
func (st *strictState) wrongType(path string, want []jsonKind, got jsonKind) *apiError {
	if st.openai() {
		names := make([]string, len(want))
		for i, k := range want {
			names[i] = openaiKind(k)
		}
		w := names[0]
		if len(names) > 1 {
			w = "one of " + strings.Join(names, " or ")
		}
		g := openaiKind(got)
		if got == kindNull {
			g = "null"
		}
		return invalid(fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", path, w, g), path, "invalid_type")
	}
	return invalid(fmt.Sprintf("%s: Input should be %s", path, anthropicKind(want[0])), "", "")
}

// checkKinds type-checks the fields that fieldKinds lists; OpenAI takes
// null for an optional field, Anthropic for none.
func (st *strictState) checkKinds(ep endpoint, names []string, fields map[string]json.RawMessage) *apiError {
	for _, n := range names {
		want, ok := fieldKinds[ep][n]
		if !ok {
			continue
		}
		got := kindOf(fields[n])
		if got == kindNull && st.openai() && !slicesContains(required[ep], n) {
			continue
		}
		fits := false
		for _, k := range want {
			fits = fits || k == got || (k == kindNumber && got == kindInteger)
		}
		if !fits {
			return st.wrongType(n, want, got)
		}
	}
	return nil
}

// parseQuery validates a request of a provider batch as the provider
// does and reads what its reply depends on: the model, the input tokens,
// the output limit, the markers. A batch's requests are never streamed:
// "stream": true is refused.
func (st *strictState) parseQuery(ep endpoint, body []byte) (*query, *apiError) {
	q, e := st.parseRequest(ep, body)
	if e == nil && q.stream {
		return nil, invalid("fakeapi: streaming (\"stream\": true) is not supported in a batch request by this stand-in.", "stream", "")
	}
	return q, e
}

// parseRequest validates a real-time inference request as the provider
// does and reads what its reply depends on: the model, the input tokens,
// the output limit, whether it streams, the markers.
func (st *strictState) parseRequest(ep endpoint, body []byte) (*query, *apiError) {
	names, fields, err := objectFields(body)
	if err != nil {
		return nil, st.badJSON()
	}
	if e := st.unknownField(string(ep), names); e != nil {
		return nil, e
	}
	for _, n := range required[ep] {
		if _, ok := fields[n]; !ok {
			return nil, st.missing(n)
		}
	}
	if e := st.checkKinds(ep, names, fields); e != nil {
		return nil, e
	}
	q := &query{ep: ep, max: -1, n: 1}
	_ = json.Unmarshal(fields["model"], &q.model)
	if e := st.parseStream(q, fields); e != nil {
		return nil, e
	}
	var e *apiError
	switch ep {
	case endpointChat:
		e = st.parseChat(q, fields)
	case endpointEmbeddings:
		e = st.parseEmbeddings(q, fields)
	case endpointMessages:
		e = st.parseMessages(q, fields)
	case endpointResponses:
		e = st.parseResponses(q, fields)
	}
	if e != nil {
		return nil, e
	}
	var textBytes int64
	for _, t := range q.texts {
		textBytes += int64(len(t))
	}
	// The input tokens: a quarter of the text's bytes, rounded up (at least
	// 1), plus one per token given as a number. Never more than the body's
	// length: the text is part of the body, and JSON escapes only lengthen
	// it.
	q.input = max(1, (textBytes+3)/4)
	for _, toks := range q.tokens {
		q.input += int64(len(toks))
	}
	q.out = int64(st.outputTokens)
	if q.marks.output >= 0 {
		q.out = q.marks.output
	}
	if q.max >= 0 {
		q.out = min(q.out, q.max)
	}
	if ep == endpointEmbeddings {
		q.out = 0
	}
	return q, nil
}

// intField reads an integer field already type-checked; ok false when
// absent or null.
func intField(fields map[string]json.RawMessage, name string) (int64, bool) {
	raw, ok := fields[name]
	if !ok || kindOf(raw) != kindInteger {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return n, err == nil
}

// parseChat reads a chat completion request (openai-openapi
// CreateChatCompletionRequest, ChatCompletionRequestMessage).
func (st *strictState) parseChat(q *query, fields map[string]json.RawMessage) *apiError {
	var msgs []json.RawMessage
	_ = json.Unmarshal(fields["messages"], &msgs)
	if len(msgs) == 0 {
		return invalid("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array")
	}
	last, e := st.readMessages(q, msgs, "messages[%d]", func(path string, m map[string]json.RawMessage) *apiError {
		roleRaw, ok := m["role"]
		if !ok {
			return st.missing(path + ".role")
		}
		var role string
		if json.Unmarshal(roleRaw, &role) != nil {
			return st.wrongType(path+".role", []jsonKind{kindString}, kindOf(roleRaw))
		}
		switch role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", role), path+".role", "invalid_value")
		}
		if _, has := m["content"]; !has && role != "assistant" {
			return st.missing(path + ".content")
		}
		return nil
	})
	if e != nil {
		return e
	}
	for _, extra := range []string{"tools", "functions", "response_format"} {
		if raw, ok := fields[extra]; ok {
			q.texts = append(q.texts, string(raw))
		}
	}
	if e := st.userMarks(q, msgs, last); e != nil {
		return e
	}
	if n, ok := intField(fields, "max_completion_tokens"); ok {
		q.max = n
	}
	if n, ok := intField(fields, "max_tokens"); ok && (q.max < 0 || n < q.max) {
		q.max = n
	}
	if q.max == 0 || q.max < -1 {
		return invalid(fmt.Sprintf("Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got %d instead.", q.max), "max_tokens", "integer_below_min_value")
	}
	if n, ok := intField(fields, "n"); ok {
		if n < 1 || n > 128 {
			return invalid(fmt.Sprintf("Invalid 'n': integer out of range. Expected a value between 1 and 128, but got %d instead.", n), "n", "integer_out_of_range")
		}
		q.n = int(n)
	}
	return nil
}

// readMessages reads the messages of a request: check refuses a message
// (an object, decoded; path is pathFormat with its index) or passes its
// role (a string) and content, whose texts go into q.texts. A message
// that is not an object is refused first, as the APIs do. last is the
// index of the last user message (-1: none).
func (st *strictState) readMessages(q *query, msgs []json.RawMessage, pathFormat string,
	check func(path string, m map[string]json.RawMessage) *apiError) (last int, e *apiError) {
	last = -1
	for i, raw := range msgs {
		path := fmt.Sprintf(pathFormat, i)
		if kindOf(raw) != kindObject {
			return last, st.wrongType(path, []jsonKind{kindObject}, kindOf(raw))
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		if e := check(path, m); e != nil {
			return last, e
		}
		var role string
		_ = json.Unmarshal(m["role"], &role)
		texts, e := st.contentTexts(path+".content", m["content"])
		if e != nil {
			return last, e
		}
		q.texts = append(q.texts, texts...)
		if role == "user" {
			last = i
		}
	}
	return last, nil
}

// userMarks sets q.marks from the markers of the last user message,
// msgs[last] (none when last < 0).
func (st *strictState) userMarks(q *query, msgs []json.RawMessage, last int) *apiError {
	q.marks = noMarks()
	if last < 0 {
		return nil
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(msgs[last], &m)
	texts, _ := st.contentTexts("", m["content"])
	mk, e := st.parseMarks(texts)
	if e != nil {
		return e
	}
	q.marks = mk
	return nil
}

// contentTexts returns a message content's text: the string, or each
// part's "text" (a part without text counts as its JSON).
func (st *strictState) contentTexts(path string, raw json.RawMessage) ([]string, *apiError) {
	switch kindOf(raw) {
	case kindNull:
		return nil, nil
	case kindString:
		var s string
		_ = json.Unmarshal(raw, &s)
		return []string{s}, nil
	case kindArray:
		var parts []json.RawMessage
		_ = json.Unmarshal(raw, &parts)
		var out []string
		for _, p := range parts {
			var part struct {
				Text *string `json:"text"`
			}
			if kindOf(p) == kindObject && json.Unmarshal(p, &part) == nil && part.Text != nil {
				out = append(out, *part.Text)
			} else {
				out = append(out, string(p))
			}
		}
		return out, nil
	}
	return nil, st.wrongType(path, []jsonKind{kindString, kindArray}, kindOf(raw))
}

// parseEmbeddings reads an embeddings request (openai-openapi
// CreateEmbeddingRequest: input a string, an array of strings, of
// integers, or of arrays of integers).
func (st *strictState) parseEmbeddings(q *query, fields map[string]json.RawMessage) *apiError {
	raw := fields["input"]
	badInput := invalid("'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", "", "")
	switch kindOf(raw) {
	case kindString:
		var s string
		_ = json.Unmarshal(raw, &s)
		if s == "" {
			return badInput
		}
		q.texts = []string{s}
	case kindArray:
		var items []json.RawMessage
		_ = json.Unmarshal(raw, &items)
		if len(items) == 0 || len(items) > 2048 {
			return badInput
		}
		var ints []int64
		for _, it := range items {
			switch kindOf(it) {
			case kindString:
				var s string
				_ = json.Unmarshal(it, &s)
				if s == "" {
					return badInput
				}
				q.texts = append(q.texts, s)
			case kindInteger:
				var n int64
				_ = json.Unmarshal(it, &n)
				ints = append(ints, n)
			case kindArray:
				var toks []int64
				if json.Unmarshal(it, &toks) != nil || len(toks) == 0 {
					return badInput
				}
				q.tokens = append(q.tokens, toks)
			default:
				return badInput
			}
		}
		if ints != nil {
			if len(q.texts) > 0 || len(q.tokens) > 0 {
				return badInput
			}
			q.tokens = [][]int64{ints}
		}
		if len(q.texts) > 0 && len(q.tokens) > 0 {
			return badInput
		}
	}
	var mk marks = noMarks()
	if len(q.texts) > 0 {
		var e *apiError
		if mk, e = st.parseMarks(q.texts[len(q.texts)-1:]); e != nil {
			return e
		}
	}
	q.marks = mk
	q.dims = 16
	if n, ok := intField(fields, "dimensions"); ok {
		if n < 1 || n > 4096 {
			return invalid(fmt.Sprintf("Invalid 'dimensions': integer below minimum value. Expected a value >= 1, but got %d instead.", n), "dimensions", "integer_below_min_value")
		}
		q.dims = int(n)
	}
	if raw, ok := fields["encoding_format"]; ok && kindOf(raw) == kindString {
		var f string
		_ = json.Unmarshal(raw, &f)
		switch f {
		case "float":
		case "base64":
			q.base64 = true
		default:
			return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: 'float' and 'base64'.", f), "encoding_format", "invalid_value")
		}
	}
	return nil
}

// parseMessages reads a Messages API request (anthropic-sdk-go
// MessageNewParams, MessageParam: role "user" or "assistant", content a
// string or a list of blocks).
func (st *strictState) parseMessages(q *query, fields map[string]json.RawMessage) *apiError {
	var msgs []json.RawMessage
	_ = json.Unmarshal(fields["messages"], &msgs)
	if len(msgs) == 0 {
		return invalid("messages: at least one message is required", "", "")
	}
	last, e := st.readMessages(q, msgs, "messages.%d", func(path string, m map[string]json.RawMessage) *apiError {
		for name := range m {
			if name != "role" && name != "content" {
				return invalid(path+"."+name+": Extra inputs are not permitted", "", "")
			}
		}
		roleRaw, ok := m["role"]
		if !ok {
			return st.missing(path + ".role")
		}
		var role string
		_ = json.Unmarshal(roleRaw, &role)
		if role != "user" && role != "assistant" {
			return invalid(path+".role: Input should be 'user' or 'assistant'", "", "")
		}
		content, ok := m["content"]
		if !ok {
			return st.missing(path + ".content")
		}
		if k := kindOf(content); k != kindString && k != kindArray {
			return st.wrongType(path+".content", []jsonKind{kindString, kindArray}, k)
		}
		return nil
	})
	if e != nil {
		return e
	}
	if raw, ok := fields["system"]; ok {
		texts, e := st.contentTexts("system", raw)
		if e != nil {
			return e
		}
		q.texts = append(q.texts, texts...)
	}
	if raw, ok := fields["tools"]; ok {
		q.texts = append(q.texts, string(raw))
	}
	if e := st.userMarks(q, msgs, last); e != nil {
		return e
	}
	q.max, _ = intField(fields, "max_tokens")
	if q.max < 0 {
		return invalid("max_tokens: Input should be greater than or equal to 0", "", "")
	}
	return nil
}

// inference answers a real-time inference request: validate, apply the
// markers, admit it against the key's and its account's limits, wait (or
// stream), reply with usage.
func (c *call) inference(ep endpoint) {
	st, k := c.st, c.k
	k.requests.Add(1)
	q, e := st.parseRequest(ep, c.body)
	if e == nil && !st.serves(q.model) {
		e = st.modelNotFound(q.model)
	}
	if e != nil {
		c.fail(e)
		return
	}
	if status := int(st.forceStatus.Load()); status != 0 {
		k.forced.Add(1)
		c.fail(st.statusError(status))
		return
	}
	if e := st.markError(q, k); e != nil {
		c.fail(e)
		return
	}
	m := k.model(q.model)
	if m != nil {
		m.requests.Add(1)
	}
	tokens := q.input + q.out*int64(q.n)
	a := st.admit(k, m, q.model, tokens)
	setStrictRateHeaders(c.w, st.provider, a)
	if !a.ok {
		k.rateLimited.Add(1)
		if m != nil {
			m.rateLimited.Add(1)
		}
		if d := a.refused; d != nil {
			if d.model && d.set.account == nil && m != nil {
				m.modelLimit.Add(1)
			}
			if d.set.account != nil {
				d.set.account.rateLimited.Add(1)
			}
		}
		e := st.limitError(k, q, a)
		if k.bare {
			e.header = nil
		}
		c.fail(e)
		return
	}
	if k.account != nil {
		k.account.admitted.Add(1)
		k.account.tokens.Add(tokens)
	}
	k.start()
	defer k.finish()
	answered := func() {
		k.usage.add(q.model, false, q.input, q.out*int64(q.n))
		k.tokensUsed.Add(tokens)
		k.ok.Add(1)
		if m != nil {
			m.tokensUsed.Add(tokens)
			m.ok.Add(1)
		}
	}
	d := time.Duration(st.latency.Load()) + q.marks.latency
	if q.stream {
		c.streamReply(q, d, answered)
		return
	}
	if !sleep(c.r.Context(), d) {
		return // the client is gone
	}
	answered()
	c.reply(st.replyBody(q, c.reqID, false))
}

// modelNotFound is the provider's 404 for a model it does not serve:
// OpenAI "The model `x` does not exist or you do not have access to it."
// with code model_not_found, Anthropic not_found_error "model: x".
func (st *strictState) modelNotFound(model string) *apiError {
	if st.openai() {
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: strp("model_not_found"),
			message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model)}
	}
	return &apiError{status: http.StatusNotFound, typ: "not_found_error", message: "model: " + model}
}

// thousands writes n with comma separators, as Anthropic's messages do.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
