package queue

import (
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Open reads what exists before it writes: a stream, consumer or bucket
// whose configuration already holds every setting keyfleet gives it is
// used as it is. Each update is a write on the server, and in a cluster a
// proposal to the meta group, so a fleet of hundreds of workers starting
// at once (a deployment, a rolling restart) would otherwise send hundreds
// of identical updates. A setting keyfleet leaves at zero is the server's
// default and is not compared, so a start that finds nothing else to
// change leaves it as an operator set it.

// streamHolds reports whether have, a stream's configuration as the
// server reports it, holds every setting of want.
func streamHolds(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description &&
		slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		have.Discard == want.Discard &&
		replicasHold(have.Replicas, want.Replicas) &&
		zeroOrEqual(want.Duplicates, have.Duplicates) &&
		zeroOrEqual(want.MaxMsgsPerSubject, have.MaxMsgsPerSubject) &&
		have.MaxAge == want.MaxAge
}

// consumerHolds reports whether have, a consumer's configuration as the
// server reports it, holds every setting of want.
func consumerHolds(have, want jetstream.ConsumerConfig) bool {
	ackWait := want.AckWait
	if len(want.BackOff) > 0 {
		ackWait = want.BackOff[0] // the server's rule: the first back-off is the ack wait
	}
	return have.Durable == want.Durable &&
		have.Description == want.Description &&
		have.AckPolicy == want.AckPolicy &&
		zeroOrEqual(ackWait, have.AckWait) &&
		zeroOrEqual(want.MaxDeliver, have.MaxDeliver) &&
		slices.Equal(have.BackOff, want.BackOff) &&
		have.FilterSubject == want.FilterSubject &&
		metadataHolds(have.Metadata, want.Metadata) &&
		zeroOrEqual(want.MaxAckPending, have.MaxAckPending) &&
		zeroOrEqual(want.MaxWaiting, have.MaxWaiting) &&
		replicasHold(have.Replicas, want.Replicas)
}

// metadataHolds reports whether have holds every key of want with its
// value. The server adds keys of its own (_nats.ver, _nats.level,
// _nats.req.level): those are not keyfleet's to compare.
func metadataHolds(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// bucketHolds reports whether the stream behind a key-value bucket, as
// the server reports it, holds every setting of want.
func bucketHolds(have jetstream.StreamConfig, want jetstream.KeyValueConfig) bool {
	return have.Description == want.Description &&
		have.MaxAge == want.TTL &&
		have.Storage == want.Storage &&
		replicasHold(have.Replicas, want.Replicas) &&
		have.MaxMsgsPerSubject == int64(max(want.History, 1))
}

// zeroOrEqual: want is the server's default (zero) or have is want.
func zeroOrEqual[T comparable](want, have T) bool {
	var zero T
	return want == zero || have == want
}

// replicasHold: 0 and 1 both mean one copy.
func replicasHold(have, want int) bool { return max(have, 1) == max(want, 1) }
