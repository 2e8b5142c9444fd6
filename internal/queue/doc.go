// Package queue is keyfleet's use of NATS JetStream: the work stream and
// its lanes' durable pull consumers, the results and dead-letter streams,
// the batch records, the worker registry, the provider batch records and
// the publishing code shared by the producer and the tests. The records
// it stores are internal/kftype's types.
//
// Streams and buckets (names from Config; subjects from
// Config.SubjectPrefix, "P"):
//
//	<Stream>          P.b.>                         work queue; message ID "<batch>/<item id>" (MsgID)
//	                  P.b.<batch>.<kind>            a batch's items without a scope (its first lane)
//	                  P.b.<batch>.<kind>.<scope>    its items of one scope (a lane each)
//	                  P.b.<batch>.s.<kind>.<scope>.<endpoint>  items staged for a provider's Batch API
//	<Stream>_RESULTS  P.results.<batch>.<item>      the latest outcome per item
//	<Stream>_DLQ      P.dlq.<batch>.<item>          one dead-letter record per item
//	KV  <Stream>_WORKERS                            worker heartbeats (expire by TTL)
//	KV  <Stream>_BATCHES                            one record per batch (kftype.BatchInfo)
//	KV  <Stream>_PBATCHES, OBJ <Stream>_PBINPUT     provider batch records and their input (pbatch.go)
//
// Each lane has its own consumer, <Consumer>-b-<hash of the batch>[-s-<hash
// of the scope>] (LaneConsumerName), made when first pulled from. Batch,
// item and scope IDs become subject tokens through Token, a reversible
// escape that keeps letters, digits, '-' and '_' readable.
//
// The work stream has work-queue retention: an ack or a term deletes the
// message. An unacknowledged message is the checkpoint: JetStream gives it
// to another worker after the ack wait, or at once after a nak.
//
// A handle given a LaneWriter registers the lanes of every batch record
// it writes in the lane schedule (internal/batchlanes).
package queue
