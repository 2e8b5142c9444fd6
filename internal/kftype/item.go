package kftype

// Item is one work item on the wire.
type Item struct {
	ID, Batch, Kind string
	Payload         []byte // the item's JSON object
	// Replay marks an item put back from the dead-letter queue (its message
	// ID differs so that deduplication does not drop it).
	Replay string
	// Cost is the item's estimated cost, for the pool's cost limits (0: not
	// given; the worker reads it from the payload).
	Cost int64
	// Scope is the item's scope (its model, say: the pool.scope field of
	// its payload, read at enqueue); "" for none. Items of one batch and
	// scope travel in their own lane (Lane).
	Scope string
	// Endpoint is the API path a provider kind's request goes to when it
	// is not the provider's default (an OpenAI batch line's url, such as
	// /v1/embeddings); "" for the default.
	Endpoint string
	// Staged: the item waits for a provider's Batch API (its batch has a
	// deadline): it is published on the batch's staging subject, which no
	// lane reads (queue.StagingSubject), for a worker to put into a
	// provider batch (internal/batchapi).
	Staged bool
	// Fallback names the provider batch record (queue.ProviderBatch.ID)
	// the item comes back from to run in real time: its message ID
	// differs from the item's first one, so that deduplication does not
	// drop it.
	Fallback string
}
