package batchapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// openaiAPI is a key's OpenAI Files and Batch API, on the official SDK
// (github.com/openai/openai-go/v3).
type openaiAPI struct {
	c openai.Client
}

// newOpenAI is the API at base (the kind's url or the key's own; a base
// ending in /v1, as OPENAI_BASE_URL is written, works too) with key. The
// SDK's environment defaults (OPENAI_BASE_URL, OPENAI_API_KEY) are
// overridden; the organization and project headers the environment may
// add are removed: the configured key decides.
func newOpenAI(base, key string, hc *http.Client) *openaiAPI {
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1") + "/v1/"
	opts := []option.RequestOption{option.WithBaseURL(base), option.WithAPIKey(key),
		option.WithHeaderDel("OpenAI-Organization"), option.WithHeaderDel("OpenAI-Project")}
	if hc != nil {
		opts = append(opts, option.WithHTTPClient(hc))
	}
	return &openaiAPI{c: openai.NewClient(opts...)}
}

func (a *openaiAPI) upload(ctx context.Context, name string, input io.Reader) (string, error) {
	f, err := a.c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(input, name+".jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	}, option.WithMaxRetries(0))
	if err != nil {
		return "", fmt.Errorf("upload the input file: %w", err)
	}
	return f.ID, nil
}

func (a *openaiAPI) create(ctx context.Context, p queue.ProviderBatch, _ io.Reader) (remote, error) {
	b, err := a.c.Batches.New(ctx, openai.BatchNewParams{
		InputFileID:      p.InputFileID,
		Endpoint:         openai.BatchNewParamsEndpoint(p.Endpoint),
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata:         shared.Metadata{metadataKey: p.ID},
	}, option.WithMaxRetries(0))
	if err != nil {
		return remote{}, fmt.Errorf("create the batch: %w", err)
	}
	return openaiRemote(b), nil
}

func (a *openaiAPI) get(ctx context.Context, id string) (remote, error) {
	b, err := a.c.Batches.Get(ctx, id)
	if err != nil {
		return remote{}, fmt.Errorf("read batch %s: %w", id, err)
	}
	return openaiRemote(b), nil
}

func (a *openaiAPI) cancel(ctx context.Context, id string) (remote, error) {
	b, err := a.c.Batches.Cancel(ctx, id)
	if err != nil {
		return remote{}, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	return openaiRemote(b), nil
}

func (a *openaiAPI) list(ctx context.Context, fn func(remote) bool) error {
	it := a.c.Batches.ListAutoPaging(ctx, openai.BatchListParams{Limit: openai.Int(100)})
	return listAll(it, openaiRemote, "batches", fn)
}

func (a *openaiAPI) results(ctx context.Context, r remote, fn func(line) error) error {
	for _, id := range []string{r.OutputFileID, r.ErrorFileID} {
		if id == "" {
			continue
		}
		resp, err := a.c.Files.Content(ctx, id)
		if err != nil {
			return fmt.Errorf("read file %s: %w", id, err)
		}
		err = readLines(resp.Body, func(b []byte) error {
			l, err := openAIOutputLine(b)
			if err != nil {
				return fmt.Errorf("file %s: %w", id, err)
			}
			return fn(l)
		})
		resp.Body.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// openaiRemote is what keyfleet reads of an OpenAI Batch.
func openaiRemote(b *openai.Batch) remote {
	r := remote{ID: b.ID, Status: string(b.Status), OutputFileID: b.OutputFileID, ErrorFileID: b.ErrorFileID,
		Total: b.RequestCounts.Total, Completed: b.RequestCounts.Completed, Failed: b.RequestCounts.Failed,
		CreatedAt: time.Unix(b.CreatedAt, 0), Record: b.Metadata[metadataKey]}
	switch b.Status {
	case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusExpired, openai.BatchStatusCancelled:
		r.Ended = true
	}
	return r
}

// openaiStatus is the HTTP status of an OpenAI SDK error (0: none came).
func openaiStatus(err error) int {
	var e *openai.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
