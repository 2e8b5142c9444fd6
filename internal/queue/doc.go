// Package queue is keyfleet's use of NATS JetStream: the work stream and its
// durable pull consumer, the results and dead-letter streams, the worker
// registry, and the publishing code shared by the producer and the tests.
//
// Streams (names from Config; subjects from Config.SubjectPrefix, "P"):
//
//	<Stream>          P.<kind>                work queue; message ID "<batch>/<item id>"
//	<Stream>_RESULTS  P.results.<batch>.<item> the latest outcome per item
//	<Stream>_DLQ      P.dlq.<batch>.<item>     one dead-letter record per item
//	KV <Stream>_WORKERS                       worker heartbeats (expire by TTL)
//	KV <Stream>_BATCHES                       one record per batch: items enqueued (see BatchInfo)
//
// Batch and item IDs become subject tokens through Token, a reversible
// escape that keeps letters, digits, '-' and '_' readable.
//
// The work stream has work-queue retention: an ack or a term deletes the
// message. An unacknowledged message is the checkpoint: JetStream gives it
// to another worker after the ack wait, or at once after a nak.
package queue
