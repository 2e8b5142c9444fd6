package batchapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// Bounds are what one provider batch may hold.
type Bounds struct {
	// MaxRequests: requests per provider batch.
	MaxRequests int
	// MaxBytes: the input's size (OpenAI: the JSONL file; Anthropic: the
	// whole request body, {"requests": [...]}).
	MaxBytes int64
}

// DefaultBounds are the providers' own: OpenAI "up to 50,000 requests,
// and can be up to 200 MB in size" (openai-go BatchNewParams.InputFileID);
// Anthropic "either 100,000 Message requests or 256 MB in size, whichever
// is reached first" (Message Batches, batch limitations).
var DefaultBounds = map[string]Bounds{
	provider.OpenAI:    {MaxRequests: 50_000, MaxBytes: 200 << 20},
	provider.Anthropic: {MaxRequests: 100_000, MaxBytes: 256 << 20},
}

// anthropicWrap is what the body of a message batch adds to its
// requests: {"requests":[ and ]}.
const anthropicWrap = int64(len(`{"requests":[`) + len(`]}`))

// CustomID is the custom_id of a provider batch's i-th request. Item IDs
// are free text up to 512 bytes and a custom_id must match
// ^[a-zA-Z0-9_-]{1,64}$ (Anthropic; OpenAI's is free but unique): the
// record's manifest maps each index back to its item.
func CustomID(i int) string { return "r" + strconv.Itoa(i) }

// customIndex reverses CustomID (false for a custom_id it did not make).
func customIndex(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "r")
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// inputLine is the i-th request of a provider batch's input: OpenAI's
// batch file line {"custom_id", "method": "POST", "url", "body"},
// Anthropic's {"custom_id", "params"}; the item's request is the body or
// params byte for byte.
func inputLine(prov string, i int, endpoint string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(payload) + 96)
	b.WriteString(`{"custom_id":"`)
	b.WriteString(CustomID(i))
	if prov == provider.Anthropic {
		b.WriteString(`","params":`)
	} else {
		ep, _ := json.Marshal(endpoint)
		b.WriteString(`","method":"POST","url":`)
		b.Write(ep)
		b.WriteString(`,"body":`)
	}
	b.Write(payload)
	b.WriteString("}\n")
	return b.Bytes()
}

// requestOf reads the request (body or params) back from an input line.
func requestOf(prov string, l []byte) (json.RawMessage, error) {
	var v struct {
		Body   json.RawMessage `json:"body"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(l, &v); err != nil {
		return nil, err
	}
	if prov == provider.Anthropic {
		return v.Params, nil
	}
	return v.Body, nil
}

// chunk is one provider batch being written: its input streamed into
// the object store, its manifest kept until the end.
type chunk struct {
	prov     string
	bounds   Bounds
	endpoint string
	n        int
	size     int64
	first    uint64
	last     uint64
	manifest bytes.Buffer
	pw       *io.PipeWriter
	put      chan error
	name     string
	store    *queue.ProviderBatchStore
}

// newChunk starts writing a provider batch's input as the object name.
func newChunk(ctx context.Context, store *queue.ProviderBatchStore, name, prov, endpoint string, b Bounds) *chunk {
	pr, pw := io.Pipe()
	c := &chunk{prov: prov, bounds: b, endpoint: endpoint, pw: pw, put: make(chan error, 1), name: name, store: store}
	if prov == provider.Anthropic {
		c.size = anthropicWrap
	}
	go func() {
		_, err := store.PutObject(ctx, name, pr)
		_ = pr.CloseWithError(err) // unblocks a writer when Put failed
		c.put <- err
	}()
	return c
}

// lineCost is what adding a line of n bytes adds to the input's size
// (Anthropic: its comma too, and no line break).
func (c *chunk) lineCost(n int) int64 {
	if c.prov == provider.Anthropic {
		if c.n == 0 {
			return int64(n - 1)
		}
		return int64(n) // n-1 bytes and a comma
	}
	return int64(n)
}

// fits reports whether a line of n bytes fits the bounds.
func (c *chunk) fits(n int) bool {
	return c.n < c.bounds.MaxRequests && c.size+c.lineCost(n) <= c.bounds.MaxBytes
}

// full reports whether no more request fits by count.
func (c *chunk) full() bool { return c.n >= c.bounds.MaxRequests }

// add writes a staged message as the next request; the caller checked
// that it fits.
func (c *chunk) add(m *queue.StagedMsg, line []byte) error {
	if _, err := c.pw.Write(line); err != nil {
		return err
	}
	c.size += c.lineCost(len(line))
	if c.n == 0 {
		c.first = m.Seq
	}
	c.last = m.Seq
	c.n++
	entry, _ := json.Marshal(queue.ProviderBatchItem{ID: m.Item.ID, Seq: m.Seq, Cost: m.Item.Cost})
	c.manifest.Write(entry)
	c.manifest.WriteByte('\n')
	return nil
}

// finish ends the input (waiting until it is stored) and stores the
// manifest as manifestName.
func (c *chunk) finish(ctx context.Context, manifestName string) error {
	_ = c.pw.Close()
	if err := <-c.put; err != nil {
		return err
	}
	_, err := c.store.PutObject(ctx, manifestName, bytes.NewReader(c.manifest.Bytes()))
	return err
}

// abort drops what was written.
func (c *chunk) abort(ctx context.Context) {
	_ = c.pw.CloseWithError(errAborted)
	<-c.put
	c.store.DeleteObjects(ctx, queue.ProviderBatch{Input: c.name})
}

var errAborted = errors.New("batchapi: chunk aborted")

// recordID is the ID of the record of the chunk that starts with the
// message seq of subject: two workers that chunk the same staged messages
// write the same ID, and the second's creation fails.
func recordID(stream, subject string, seq uint64) string {
	sum := sha256.Sum256([]byte(stream + "\x00" + subject + "\x00" + strconv.FormatUint(seq, 10)))
	return "pb-" + hex.EncodeToString(sum[:8])
}

// nonce keeps the objects of two workers' chunks of the same ID apart.
func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// chunkPlan is what a staging pass of one subject may do: chunks short of
// the bounds only when settled (no enqueue adds to it any more).
func chunkPlan(count uint64, b Bounds, settled bool) bool {
	return settled || count >= uint64(b.MaxRequests)
}

// errNotFull: the chunk ended short of the bounds while the subject is
// not settled: it waits for more.
var errNotFull = fmt.Errorf("batchapi: chunk short of the bounds: waiting for the rest of the enqueue")
