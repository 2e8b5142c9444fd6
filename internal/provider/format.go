package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// Item formats at enqueue (and result formats).
const (
	// FormatJSONL: a line is the item; to a provider kind its request is
	// the line without its ID field.
	FormatJSONL = "jsonl"
	// FormatOpenAIBatch: a line of OpenAI's Batch API input file,
	// {"custom_id", "method": "POST", "url": "/v1/…", "body": {…}}.
	FormatOpenAIBatch = "openai-batch"
	// FormatAnthropicBatch: {"custom_id", "params": {…}}, a request of an
	// Anthropic Message Batch.
	FormatAnthropicBatch = "anthropic-batch"
)

// Formats lists the item formats.
var Formats = []string{FormatJSONL, FormatOpenAIBatch, FormatAnthropicBatch}

// CustomID is the ID field of the batch formats.
const CustomID = "custom_id"

// CheckFormat reports whether format is an item format, and one a kind of
// provider p ("" for a kind without one) can take: a provider's batch
// format needs a kind of that provider.
func CheckFormat(format, p string) error {
	switch format {
	case FormatJSONL:
		return nil
	case FormatOpenAIBatch, FormatAnthropicBatch:
		spec, ok := Lookup(p)
		if !ok || spec.BatchFormat != format {
			want := OpenAI + " or " + OpenAICompatible
			if format == FormatAnthropicBatch {
				want = Anthropic
			}
			if p == "" {
				return fmt.Errorf("format %s takes a kind of provider %s; this kind names no provider (http: {provider: ...})", format, want)
			}
			return fmt.Errorf("format %s takes a kind of provider %s; this kind's provider is %s", format, want, p)
		}
		return nil
	}
	return fmt.Errorf("unknown format %q (want %s)", format, strings.Join(Formats, ", "))
}

// IDField is the field holding an item's ID in format: custom_id for the
// batch formats, else idField.
func IDField(format, idField string) string {
	if format == FormatOpenAIBatch || format == FormatAnthropicBatch {
		return CustomID
	}
	return idField
}

// Request is what one line asks of the provider.
type Request struct {
	// Body is the request's body, exactly as the line holds it.
	Body []byte
	// Endpoint is the path it goes to: the line's url (OpenAI batch
	// format) or the provider's Endpoint.
	Endpoint string
	// Model is the request's model: the item's scope.
	Model string
	// Estimate is what the request is expected to cost in tokens: its
	// prompt text's characters ÷ 4 plus its max_completion_tokens /
	// max_tokens (DefaultMaxTokens when absent).
	Estimate int64
	// InputCeiling and MaxOutput are the most tokens the request can use,
	// for a budget's reservation: its input counted high (a token per byte
	// of the body: no tokenizer counts more) and its max output tokens;
	// MaxOutputGiven says the request names that bound (without it the
	// API's own default applies, which a budget cannot know).
	InputCeiling, MaxOutput int64
	MaxOutputGiven          bool
}

// FieldError is a line that is not a request the provider takes: Field
// names where (body.model, params.max_tokens, url, custom_id).
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// ErrNotRequest is what a FieldError is (errors.Is).
var ErrNotRequest = errors.New("not a request the provider takes")

func (e *FieldError) Is(target error) bool { return target == ErrNotRequest }

// Parse reads one line (a JSON object, already checked valid) of format
// as a request to the provider of spec; idField is the line's ID field
// (jsonl). Its error is a *FieldError naming the field.
func (s Spec) Parse(format, idField string, line []byte) (Request, error) {
	var req Request
	prefix := ""
	switch format {
	case FormatJSONL:
		req.Body, req.Endpoint = jsonl.Without(line, idField), s.Endpoint
	case FormatOpenAIBatch:
		if err := checkCustomID(line); err != nil {
			return req, err
		}
		method, _ := jsonl.Field(line, "method")
		if m := stringValue(method); m != "POST" {
			return req, &FieldError{"method", fmt.Sprintf("is %s, want \"POST\" (the Batch API's only method)", shown(method))}
		}
		url, ok := jsonl.Field(line, "url")
		u := stringValue(url)
		switch {
		case !ok:
			return req, &FieldError{"url", "missing: the endpoint, such as \"/v1/chat/completions\""}
		case !slices.Contains(s.Endpoints, u):
			return req, &FieldError{"url", fmt.Sprintf("is %s, want one of %s", shown(url), strings.Join(s.Endpoints, ", "))}
		}
		body, ok := jsonl.Field(line, "body")
		if !ok || body[0] != '{' {
			return req, &FieldError{"body", "missing or not an object: the request's body"}
		}
		req.Body, req.Endpoint, prefix = body, u, "body."
	case FormatAnthropicBatch:
		if err := checkCustomID(line); err != nil {
			return req, err
		}
		params, ok := jsonl.Field(line, "params")
		if !ok || params[0] != '{' {
			return req, &FieldError{"params", "missing or not an object: the request's parameters (a Messages request)"}
		}
		req.Body, req.Endpoint, prefix = params, s.Endpoint, "params."
	default:
		return req, CheckFormat(format, s.Name)
	}
	for _, f := range s.required(req.Endpoint) {
		if v, ok := jsonl.Field(req.Body, f); !ok || string(v) == "null" {
			return req, &FieldError{prefix + f, "missing: the provider refuses a request without it"}
		}
	}
	model, _ := jsonl.Field(req.Body, "model")
	if model[0] != '"' || stringValue(model) == "" {
		return req, &FieldError{prefix + "model", fmt.Sprintf("is %s, want the model's name", shown(model))}
	}
	req.Model = stringValue(model)
	est, ferr := estimate(req.Body, req.Endpoint)
	if ferr != nil {
		ferr.Field = prefix + ferr.Field
		return req, ferr
	}
	req.Estimate, req.InputCeiling, req.MaxOutput, req.MaxOutputGiven = est.tokens, int64(len(req.Body)), est.maxOut, est.given
	return req, nil
}

// required are the top-level fields a request to endpoint must have, as
// the provider refuses it without them.
func (s Spec) required(endpoint string) []string {
	switch {
	case s.IsAnthropic():
		return []string{"model", "max_tokens", "messages"}
	case endpoint == "/v1/embeddings", endpoint == "/v1/responses":
		return []string{"model", "input"}
	case endpoint == "/v1/completions":
		return []string{"model", "prompt"}
	}
	return []string{"model", "messages"}
}

// checkCustomID: custom_id is a non-empty string (the reader found it).
func checkCustomID(line []byte) error {
	v, _ := jsonl.Field(line, CustomID)
	if len(v) == 0 || v[0] != '"' {
		return &FieldError{CustomID, fmt.Sprintf("is %s, want a string", shown(v))}
	}
	return nil
}

// stringValue is a JSON string's value ("" for anything else).
func stringValue(raw []byte) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// shown quotes a raw value for an error, bounded.
func shown(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "missing"
	}
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}
