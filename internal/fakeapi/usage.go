package fakeapi

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Usage is what strict replies reported: how many replies carried usage,
// and their input and output tokens as the usage said them
// (prompt_tokens / completion_tokens, input_tokens / output_tokens).
type Usage struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

func (u *Usage) add(v Usage) {
	u.Requests += v.Requests
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
}

// UsageSplit is usage split by how it was billed: real time, or through
// a provider's Batch API (the batch's lines that succeeded).
type UsageSplit struct {
	RealTime Usage `json:"real_time"`
	Batch    Usage `json:"batch"`
}

func (u *UsageSplit) add(v UsageSplit) {
	u.RealTime.add(v.RealTime)
	u.Batch.add(v.Batch)
}

// usageBook is one key's usage, in all and by model.
type usageBook struct {
	mu      sync.Mutex
	all     UsageSplit
	byModel map[string]*UsageSplit
}

func (b *usageBook) add(model string, batch bool, in, out int64) {
	u := Usage{Requests: 1, InputTokens: in, OutputTokens: out}
	var v UsageSplit
	if batch {
		v.Batch = u
	} else {
		v.RealTime = u
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.add(v)
	if b.byModel == nil {
		b.byModel = map[string]*UsageSplit{}
	}
	m := b.byModel[model]
	if m == nil {
		m = &UsageSplit{}
		b.byModel[model] = m
	}
	m.add(v)
}

func (b *usageBook) total() UsageSplit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.all
}

func (b *usageBook) models() map[string]UsageSplit {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.byModel) == 0 {
		return nil
	}
	out := make(map[string]UsageSplit, len(b.byModel))
	for name, u := range b.byModel {
		out[name] = *u
	}
	return out
}

// Usage sums the keys' usage.
func (st Stats) Usage() UsageSplit {
	var u UsageSplit
	for _, k := range st.Keys {
		u.add(k.Usage)
	}
	return u
}

// ModelUsage sums the keys' usage by model.
func (st Stats) ModelUsage() map[string]UsageSplit {
	out := map[string]UsageSplit{}
	for _, k := range st.Keys {
		for name, u := range maps.All(k.ModelUsage) {
			t := out[name]
			t.add(u)
			out[name] = t
		}
	}
	return out
}

// BatchStats count one key's calls to the strict Files and Batch APIs.
type BatchStats struct {
	// FilesCreated, FilesDeleted: POST and DELETE /v1/files that
	// succeeded. FileReads: GET of a file or its content.
	FilesCreated int64 `json:"files_created"`
	FilesDeleted int64 `json:"files_deleted"`
	FileReads    int64 `json:"file_reads"`
	// Created and Cancelled: batches created and cancel calls that
	// succeeded (OpenAI batches and Anthropic message batches alike).
	Created   int64 `json:"created"`
	Cancelled int64 `json:"cancelled"`
	// Polls: GETs of one batch; Lists: GETs of the list; Results: GETs of
	// an Anthropic batch's results.
	Polls   int64 `json:"polls"`
	Lists   int64 `json:"lists"`
	Results int64 `json:"results"`
}

type batchCounter struct {
	filesCreated, filesDeleted, fileReads atomic.Int64
	created, cancelled                    atomic.Int64
	polls, lists, results                 atomic.Int64
}

func (b *batchCounter) snapshot() BatchStats {
	return BatchStats{
		FilesCreated: b.filesCreated.Load(), FilesDeleted: b.filesDeleted.Load(), FileReads: b.fileReads.Load(),
		Created: b.created.Load(), Cancelled: b.cancelled.Load(),
		Polls: b.polls.Load(), Lists: b.lists.Load(), Results: b.results.Load(),
	}
}
