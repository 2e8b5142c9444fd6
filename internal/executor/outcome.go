package executor

import "time"

// Fate is what became of an item's delivery.
type Fate uint8

// Fates of a delivery.
const (
	// Succeeded: the result is stored and the message acknowledged.
	Succeeded Fate = iota + 1
	// DeadLettered: the dead letter and the failed result are stored and
	// the message terminated (Outcome.Reason says why).
	DeadLettered
	// Retried: a run failed (transient); the message goes back with the
	// retry backoff (Outcome.Delay).
	Retried
	// HandedBack: the delivery ends without a failed run (Outcome.Cause
	// says why); the message goes back after Outcome.Delay, or after its
	// ack wait when Outcome.Reply is ReplyNone.
	HandedBack
	// Cancelled: the batch was cancelled; the item is recorded as
	// cancelled and its message terminated.
	Cancelled
	// Interrupted: the run was cut short (Outcome.Cause: shutdown, a lost
	// lease or message); the message goes back at once, no attempt used.
	Interrupted
)

var fateNames = [...]string{Succeeded: "succeeded", DeadLettered: "dead_lettered", Retried: "retried",
	HandedBack: "handed_back", Cancelled: "cancelled", Interrupted: "interrupted"}

func (f Fate) String() string {
	if int(f) < len(fateNames) && fateNames[f] != "" {
		return fateNames[f]
	}
	return "unknown"
}

// Reply is what the server was told of the message at the end.
type Reply uint8

// Replies.
const (
	// ReplyNone: nothing (or nothing confirmed); the message comes back
	// after its ack wait.
	ReplyNone Reply = iota
	ReplyAck
	ReplyNak
	ReplyTerm
)

var replyNames = [...]string{ReplyNone: "none", ReplyAck: "ack", ReplyNak: "nak", ReplyTerm: "term"}

func (r Reply) String() string {
	if int(r) < len(replyNames) {
		return replyNames[r]
	}
	return "unknown"
}

// Outcome is what one delivery came to.
type Outcome struct {
	Fate Fate
	// Kind is the kind that ran the item: its own, or the fallback kind
	// it moved to ("" when it could not be read).
	Kind string
	// From is the item's own kind when it ran on a fallback kind (Kind),
	// Why why it moved (kftype.FallbackWaited, FallbackFailing); "" else.
	From, Why string
	// Reason is a dead letter's reason (queue.Reason*).
	Reason string
	// Cause says why an item was handed back or interrupted.
	Cause error
	// Reply is what the server was told, Delay a nak's delay.
	Reply Reply
	Delay time.Duration
	// Attempt is the item's run count as this delivery knows it (the
	// KEYFLEET_ATTEMPT of its last run; earlier deliveries' runs when it
	// did not run in this one), Failures its failed runs.
	Attempt, Failures int
	// Again counts the runs of this delivery that ran again at once on
	// another key (rate limited, refused).
	Again int
	// Took is how long the last run took.
	Took time.Duration
}
