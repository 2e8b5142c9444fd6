package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// WorkerInfo is what a worker announces about itself every heartbeat.
type WorkerInfo struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	Version     string    `json:"version"`
	State       string    `json:"state"` // running | draining
	Concurrency int       `json:"concurrency"`
	Busy        int       `json:"busy"`
	Done        int64     `json:"done"`
	Failed      int64     `json:"failed"`
	Kinds       []string  `json:"kinds"`
	StartedAt   time.Time `json:"started_at"`
	LastSeen    time.Time `json:"last_seen"`
	// Gateway is the gateway the worker serves (nil: none).
	Gateway *GatewayInfo `json:"gateway,omitempty"`
	// Fallbacks count the items this worker ran on a fallback kind
	// since it started, by kind, fallback kind and why; [] when none.
	Fallbacks []kftype.FallbackCount `json:"fallbacks"`
}

// GatewayInfo is what a worker serving the gateway announces of it: its
// address and its requests answered (errors among them: 4xx and 5xx)
// and being answered, since it started.
type GatewayInfo struct {
	Listen   string `json:"listen"`
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
	InFlight int64  `json:"in_flight"`
}

func workerKey(id string) string { return kvKey(id) }

// Announce records a worker's heartbeat; it expires after HeartbeatTTL.
func (q *Queue) Announce(ctx context.Context, w WorkerInfo) error {
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if _, err := q.workers.Put(ctx, workerKey(w.ID), data); err != nil {
		return fmt.Errorf("queue: announce worker %q: %w", w.ID, err)
	}
	return nil
}

// Withdraw removes a worker from the registry (on a clean shutdown).
func (q *Queue) Withdraw(ctx context.Context, id string) error {
	if err := q.workers.Purge(ctx, workerKey(id)); err != nil {
		return fmt.Errorf("queue: withdraw worker %q: %w", id, err)
	}
	return nil
}

// Workers lists the workers heard from within HeartbeatTTL, by ID.
func (q *Queue) Workers(ctx context.Context) ([]WorkerInfo, error) {
	out, err := listKV[WorkerInfo](ctx, q.workers, "workers", "worker")
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// listKV decodes the JSON value of every key of kv into a T, skipping keys
// deleted meanwhile and values that are not a T. Its errors name the
// records: "queue: list <plural>: ...", "queue: <one> <key>: ...".
func listKV[T any](ctx context.Context, kv jetstream.KeyValue, plural, one string) ([]T, error) {
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: list %s: %w", plural, err)
	}
	var out []T
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue: %s %s: %w", one, k, err)
		}
		var v T
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			continue // not ours
		}
		out = append(out, v)
	}
	return out, nil
}

// watchKV calls fn with every record of kv and then with every change,
// decoded by decode (false: not a record of ours, passed over), and
// caughtUp (when not nil) once every record that existed when it began
// has been passed to fn; until ctx ends (it then returns nil) or the
// watch fails. plural names the records in its errors.
func watchKV[T any](ctx context.Context, kv jetstream.KeyValue, plural string, decode func(jetstream.KeyValueEntry) (T, bool), fn func(T), caughtUp func()) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("queue: watch %s: %w", plural, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("queue: watch %s: the watch ended", plural)
			}
			if e == nil {
				if caughtUp != nil {
					caughtUp() // the initial values are all in
				}
				continue
			}
			if v, ok := decode(e); ok {
				fn(v)
			}
		}
	}
}
