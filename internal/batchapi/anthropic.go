package batchapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/keyfleet/keyfleet/internal/queue"
)

// anthropicAPI is a key's Anthropic Message Batches API, on the official
// SDK (github.com/anthropics/anthropic-sdk-go/v2).
type anthropicAPI struct {
	c anthropic.Client
}

// newAnthropic is the API at base (the kind's url or the key's own) with
// key, without the SDK's environment defaults (ANTHROPIC_BASE_URL,
// ANTHROPIC_AUTH_TOKEN, profiles): the configured key decides. The key
// goes in x-api-key, the header the API documents for keys and keyfleet's
// real-time requests send (the SDK v2's WithAPIKey sends it as a bearer
// token); anthropic-version is the SDK's own (2026-10-21), whose shapes it
// reads.
func newAnthropic(base, key string, hc *http.Client) *anthropicAPI {
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/v1")
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithBaseURL(base),
		option.WithHeader("x-api-key", key), option.WithHeaderDel("authorization")}
	if hc != nil {
		opts = append(opts, option.WithHTTPClient(hc))
	}
	return &anthropicAPI{c: anthropic.NewClient(opts...)}
}

func (a *anthropicAPI) upload(context.Context, string, io.Reader) (string, error) { return "", nil }

// create posts {"requests": [...]}, the input's lines ({"custom_id",
// "params"}, the items' requests byte for byte) joined as the SDK's
// request body.
func (a *anthropicAPI) create(ctx context.Context, _ queue.ProviderBatch, input io.Reader) (remote, error) {
	body := io.MultiReader(strings.NewReader(`{"requests":[`), &joinLines{r: bufio.NewReaderSize(input, 256<<10)}, strings.NewReader(`]}`))
	b, err := a.c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{},
		option.WithRequestBody("application/json", body), option.WithMaxRetries(0))
	if err != nil {
		return remote{}, fmt.Errorf("create the message batch: %w", err)
	}
	return anthropicRemote(b), nil
}

func (a *anthropicAPI) get(ctx context.Context, id string) (remote, error) {
	b, err := a.c.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{})
	if err != nil {
		return remote{}, fmt.Errorf("read message batch %s: %w", id, err)
	}
	return anthropicRemote(b), nil
}

func (a *anthropicAPI) cancel(ctx context.Context, id string) (remote, error) {
	b, err := a.c.Messages.Batches.Cancel(ctx, id, anthropic.MessageBatchCancelParams{})
	if err != nil {
		return remote{}, fmt.Errorf("cancel message batch %s: %w", id, err)
	}
	return anthropicRemote(b), nil
}

func (a *anthropicAPI) list(ctx context.Context, fn func(remote) bool) error {
	it := a.c.Messages.Batches.ListAutoPaging(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(100)})
	return listAll(it, anthropicRemote, "message batches", fn)
}

func (a *anthropicAPI) results(ctx context.Context, r remote, fn func(line) error) error {
	stream := a.c.Messages.Batches.ResultsStreaming(ctx, r.ID, anthropic.MessageBatchResultsParams{})
	defer stream.Close()
	for stream.Next() {
		l, err := anthropicResultLine([]byte(stream.Current().RawJSON()))
		if err != nil {
			return fmt.Errorf("results of %s: %w", r.ID, err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("results of %s: %w", r.ID, err)
	}
	return nil
}

// anthropicRemote is what keyfleet reads of a Message Batch.
func anthropicRemote(b *anthropic.MessageBatch) remote {
	n := b.RequestCounts
	return remote{ID: b.ID, Status: string(b.ProcessingStatus), Ended: b.ProcessingStatus == anthropic.MessageBatchProcessingStatusEnded,
		Total: n.Processing + n.Succeeded + n.Errored + n.Canceled + n.Expired, Completed: n.Succeeded,
		Failed: n.Errored + n.Canceled + n.Expired, CreatedAt: b.CreatedAt}
}

// anthropicStatus is the HTTP status of an Anthropic SDK error (0: none
// came).
func anthropicErrStatus(err error) int {
	var e *anthropic.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// joinLines reads JSON Lines as the elements of a JSON array: each line
// break between two lines becomes a comma, the last one is dropped. A
// JSON line holds no raw line break.
type joinLines struct {
	r       *bufio.Reader
	pending bool // a line break read, not yet written
	started bool
	err     error
}

func (j *joinLines) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if j.err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, j.err
		}
		c, err := j.r.ReadByte()
		if err != nil {
			j.err = err
			continue
		}
		if c == '\n' || c == '\r' {
			j.pending = j.started
			continue
		}
		if j.pending {
			p[n] = ','
			n++
			j.pending = false
			if n == len(p) {
				_ = j.r.UnreadByte()
				break
			}
		}
		j.started = true
		p[n] = c
		n++
	}
	return n, nil
}
