package fakeapi

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"
	"time"
)

// replyBody is the provider's reply to a validated query: a
// chat.completion, an embeddings list or a message, with its usage. batch
// marks a reply made inside a provider batch (Anthropic's usage says
// service_tier "batch").
func (st *strictState) replyBody(q *query, reqID string, batch bool) any {
	switch q.ep {
	case endpointChat:
		return st.chatReply(q)
	case endpointEmbeddings:
		return embeddingsReply(q)
	case endpointResponses:
		return st.responseReply(q)
	}
	return st.messageReply(q, batch)
}

// outputText is a reply's text of n output tokens: n words of 4 bytes, the
// same measure as the input's.
func outputText(n int64) string {
	return strings.TrimSuffix(strings.Repeat("tok ", int(n)), " ")
}

// chatReply is a chat.completion object (openai-openapi
// CreateChatCompletionResponse: id, object, created, model, choices with
// index, message, logprobs, finish_reason; usage CompletionUsage).
func (st *strictState) chatReply(q *query) any {
	type message struct {
		Role        string `json:"role"`
		Content     string `json:"content"`
		Refusal     any    `json:"refusal"`
		Annotations []any  `json:"annotations"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		Logprobs     any     `json:"logprobs"`
		FinishReason string  `json:"finish_reason"`
	}
	finish := "stop"
	if q.max >= 0 && q.out == q.max {
		finish = "length"
	}
	choices := make([]choice, q.n)
	for i := range choices {
		choices[i] = choice{Index: i, Message: message{Role: "assistant", Content: outputText(q.out), Annotations: []any{}}, FinishReason: finish}
	}
	out := q.out * int64(q.n)
	return struct {
		ID                string   `json:"id"`
		Object            string   `json:"object"`
		Created           int64    `json:"created"`
		Model             string   `json:"model"`
		Choices           []choice `json:"choices"`
		Usage             any      `json:"usage"`
		ServiceTier       string   `json:"service_tier"`
		SystemFingerprint any      `json:"system_fingerprint"`
	}{
		ID: st.nextID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(), Model: q.model,
		Choices: choices, ServiceTier: "default",
		Usage: chatUsage{PromptTokens: q.input, CompletionTokens: out, TotalTokens: q.input + out},
	}
}

// chatUsage is openai-openapi CompletionUsage.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
		AudioTokens  int64 `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int64 `json:"reasoning_tokens"`
		AudioTokens              int64 `json:"audio_tokens"`
		AcceptedPredictionTokens int64 `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int64 `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

// embeddingsReply is an embeddings list (openai-openapi
// CreateEmbeddingResponse: object "list", data of Embedding {object,
// index, embedding}, model, usage {prompt_tokens, total_tokens}); with
// encoding_format base64 each vector is its float32s, little-endian, in
// base64, which the openai SDKs ask for by default.
func embeddingsReply(q *query) any {
	type embedding struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	var inputs []string
	inputs = append(inputs, q.texts...)
	for _, toks := range q.tokens {
		var b strings.Builder
		for _, t := range toks {
			b.WriteString(string(rune(t % 0x10000)))
		}
		inputs = append(inputs, b.String())
	}
	data := make([]embedding, len(inputs))
	for i, in := range inputs {
		vec := vector(in, q.dims)
		var v any = vec
		if q.base64 {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			v = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = embedding{Object: "embedding", Index: i, Embedding: v}
	}
	return struct {
		Object string      `json:"object"`
		Data   []embedding `json:"data"`
		Model  string      `json:"model"`
		Usage  any         `json:"usage"`
	}{Object: "list", Data: data, Model: q.model, Usage: struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}{q.input, q.input}}
}

// vector is a deterministic unit-ish vector of the text.
func vector(text string, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	x := h.Sum64()
	v := make([]float32, dims)
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[i] = float32(int64(x%2001)-1000) / 1000
	}
	return v
}

// messageReply is a Messages API message (anthropic-sdk-go Message: id,
// type "message", role "assistant", content, model, stop_reason,
// stop_sequence, usage {input_tokens, output_tokens, cache_*,
// service_tier}).
func (st *strictState) messageReply(q *query, batch bool) any {
	stop := "end_turn"
	if q.out == q.max {
		stop = "max_tokens"
	}
	tier := "standard"
	if batch {
		tier = "batch"
	}
	type block struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	content := []block{}
	if q.out > 0 {
		content = append(content, block{Type: "text", Text: outputText(q.out)})
	}
	return struct {
		ID           string  `json:"id"`
		Type         string  `json:"type"`
		Role         string  `json:"role"`
		Content      []block `json:"content"`
		Model        string  `json:"model"`
		StopReason   string  `json:"stop_reason"`
		StopSequence any     `json:"stop_sequence"`
		Usage        any     `json:"usage"`
	}{
		ID: st.nextID("msg_"), Type: "message", Role: "assistant", Content: content, Model: q.model, StopReason: stop,
		Usage: struct {
			InputTokens              int64  `json:"input_tokens"`
			CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
			OutputTokens             int64  `json:"output_tokens"`
			ServiceTier              string `json:"service_tier"`
		}{InputTokens: q.input, OutputTokens: q.out, ServiceTier: tier},
	}
}

// listModels answers GET /v1/models: OpenAI's list (openai-openapi
// ListModelsResponse: object "list", data of Model {id, object "model",
// created, owned_by}), Anthropic's page (anthropic-sdk-go ModelInfo: id,
// type "model", display_name, created_at; first_id, last_id, has_more).
func (c *call) listModels() {
	if c.st.openai() {
		data := make([]any, len(c.st.listed))
		for i, id := range c.st.listed {
			data[i] = openaiModel(id)
		}
		c.reply(struct {
			Object string `json:"object"`
			Data   []any  `json:"data"`
		}{"list", data})
		return
	}
	data := make([]any, len(c.st.listed))
	for i, id := range c.st.listed {
		data[i] = anthropicModel(id)
	}
	var first, last any
	if n := len(c.st.listed); n > 0 {
		first, last = c.st.listed[0], c.st.listed[n-1]
	}
	c.reply(struct {
		Data    []any `json:"data"`
		HasMore bool  `json:"has_more"`
		FirstID any   `json:"first_id"`
		LastID  any   `json:"last_id"`
	}{data, false, first, last})
}

// getModel answers GET /v1/models/{id}.
func (c *call) getModel(id string) {
	if !slicesContains(c.st.listed, id) {
		c.fail(c.st.modelNotFound(id))
		return
	}
	if c.st.openai() {
		c.reply(openaiModel(id))
		return
	}
	c.reply(anthropicModel(id))
}

var modelCreated = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func openaiModel(id string) any {
	return struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}{id, "model", modelCreated.Unix(), "system"}
}

func anthropicModel(id string) any {
	return struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}{"model", id, id, modelCreated.Format(time.RFC3339)}
}
