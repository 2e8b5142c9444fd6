package queue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/keyfleet/keyfleet/internal/jobs"
)

// Message headers of a work item.
const (
	HeaderItem   = "Keyfleet-Item"   // the item ID
	HeaderBatch  = "Keyfleet-Batch"  // the batch ID
	HeaderKind   = "Keyfleet-Kind"   // the job kind (also the subject's last token)
	HeaderReplay = "Keyfleet-Replay" // set on items replayed from the dead-letter queue
	HeaderCost   = "Keyfleet-Cost"   // the item's estimated cost, when the producer knew it
)

// MaxIDLen bounds item and batch IDs (they become subject tokens).
const MaxIDLen = 512

// MsgID is the JetStream message ID of an item: enqueueing the same batch
// again inside the duplicate window adds nothing.
func MsgID(batch, item string) string { return batch + "/" + item }

// Token escapes s into one subject token: letters, digits, '-' and '_'
// stay; every other byte becomes "~XX" (hex). Reversible with Untoken.
func Token(s string) string {
	if tokenSafe(s) {
		return s // most IDs: nothing to escape, nothing to allocate
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if tokenByte(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "~%02X", c)
		}
	}
	return b.String()
}

// tokenSafe reports whether Token leaves s as it is.
func tokenSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

// tokenByte: the bytes a token keeps as they are.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Untoken reverses Token.
func Untoken(t string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '~' {
			b.WriteByte(t[i])
			continue
		}
		if i+2 >= len(t) {
			return "", fmt.Errorf("queue: bad token %q", t)
		}
		var c byte
		if _, err := fmt.Sscanf(t[i+1:i+3], "%02X", &c); err != nil {
			return "", fmt.Errorf("queue: bad token %q", t)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// kvKey escapes an ID into a KV key: Token's escape, with '=' for '~'
// (which KV keys cannot hold).
func kvKey(id string) string { return strings.ReplaceAll(Token(id), "~", "=") }

// CheckID reports whether an item or batch ID can be used.
func CheckID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s ID is empty", what)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%s ID is %d bytes long, at most %d", what, len(id), MaxIDLen)
	case strings.ContainsAny(id, "\r\n\x00"):
		return fmt.Errorf("%s ID %q holds a line break or NUL", what, id)
	}
	return nil
}

// Kinds are the job kinds a worker can run (jobs.Names): each has its
// subject, <prefix>.<kind>.
var Kinds = jobs.Names()

// CheckKind reports whether kind is a known job kind.
func CheckKind(kind string) error {
	if _, ok := jobs.Lookup(kind); ok {
		return nil
	}
	return fmt.Errorf("unknown job kind %q (want one of %s)", kind, strings.Join(Kinds, ", "))
}

var errNoHeader = errors.New("queue: message lacks header")

func (q *Queue) workSubjects() string           { return q.cfg.SubjectPrefix + ".*" }
func (q *Queue) resultsSubjects() string        { return q.cfg.SubjectPrefix + ".results.>" }
func (q *Queue) dlqSubjects() string            { return q.cfg.SubjectPrefix + ".dlq.>" }
func (q *Queue) resultsStream() string          { return q.cfg.Stream + "_RESULTS" }
func (q *Queue) dlqStream() string              { return q.cfg.Stream + "_DLQ" }
func (q *Queue) workersBucket() string          { return q.cfg.Stream + "_WORKERS" }
func (q *Queue) batchesBucket() string          { return q.cfg.Stream + "_BATCHES" }
func (q *Queue) itemSubject(kind string) string { return q.cfg.SubjectPrefix + "." + kind }

// ResultSubject is where an item's outcome is kept.
func (q *Queue) ResultSubject(batch, item string) string {
	return q.cfg.SubjectPrefix + ".results." + Token(batch) + "." + Token(item)
}

// DeadLetterSubject is where an item's dead-letter record is kept.
func (q *Queue) DeadLetterSubject(batch, item string) string {
	return q.cfg.SubjectPrefix + ".dlq." + Token(batch) + "." + Token(item)
}

func (q *Queue) batchFilter(kind, batch string) string {
	if batch == "" {
		return q.cfg.SubjectPrefix + "." + kind + ".>"
	}
	return q.cfg.SubjectPrefix + "." + kind + "." + Token(batch) + ".>"
}
