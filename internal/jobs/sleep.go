package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/jsonl"
)

// NewSleep returns the sleep handler, for demos and benchmarks: it sleeps
// for the payload's "ms" field (a number of milliseconds ≥ 0, fractions
// allowed; missing or null: 0), honouring ctx, and outputs
// {"slept_ms":N}. A payload that is not a JSON object, or an "ms" that is
// not a number ≥ 0, is a PermanentError. The credential is not used.
func NewSleep() Handler { return sleepHandler{} }

type sleepHandler struct{}

func (sleepHandler) Kind() string { return KindSleep }

func (sleepHandler) Run(ctx context.Context, item Item, _ Credential) (Output, error) {
	ms, err := sleepMillis(item.Payload)
	if err != nil {
		return Output{}, Permanent(err)
	}
	if ctxsleep.Sleep(ctx, time.Duration(math.Round(ms*float64(time.Millisecond)))) != nil {
		return Output{}, canceledError("sleep", ctx)
	}
	return Output{Body: []byte(`{"slept_ms":` + strconv.FormatFloat(ms, 'f', -1, 64) + `}`)}, nil
}

// maxSleepMillis keeps the duration within time.Duration.
const maxSleepMillis = float64(math.MaxInt64/int64(time.Millisecond)) - 1

// sleepMillis reads the "ms" field of a payload (the first one, should the
// object give it twice). It scans the payload in place: no decoding into a
// map, since a benchmark runs it once per item.
func sleepMillis(payload []byte) (float64, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 {
		return 0, nil
	}
	if !json.Valid(trimmed) || trimmed[0] != '{' {
		return 0, fmt.Errorf("sleep: payload is not a JSON object: %s", headString(trimmed, 40))
	}
	raw, ok := jsonl.Field(trimmed, "ms")
	if !ok || string(raw) == "null" {
		return 0, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("sleep: field \"ms\" must be a number of milliseconds ≥ 0, got %s%s", headString(raw, 40), why)
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, bad("")
	}
	ms, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case err != nil || ms > maxSleepMillis:
		return 0, bad(" (too large)")
	case ms < 0:
		return 0, bad("")
	}
	return ms, nil
}
