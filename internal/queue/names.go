package queue

import (
	"errors"
	"fmt"
	"slices"
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
	// HeaderScope is the item's scope, when it has one (encoded as the IDs
	// are: see HeaderIDEncoding).
	HeaderScope = "Keyfleet-Scope"
	// HeaderEndpoint is a provider request's API path, when it is not the
	// provider's default.
	HeaderEndpoint = "Keyfleet-Endpoint"
	// HeaderFallback names the provider batch record an item came back
	// from to run in real time (Item.Fallback).
	HeaderFallback = "Keyfleet-Fallback"
)

// MaxIDLen bounds item and batch IDs (they become subject tokens).
const MaxIDLen = 512

// HeaderIDEncoding, when a message has it, says how its Keyfleet-Item,
// Keyfleet-Batch and Keyfleet-Scope values are encoded: IDEncodingPercent. Messages whose IDs
// a header carries as they are (nearly all), and those written before the
// encoding existed, do not have it: their values are the IDs.
const HeaderIDEncoding = "Keyfleet-Id-Encoding"

// IDEncodingPercent: a '%' and two hex digits stand for a byte (see
// HeaderValue).
const IDEncodingPercent = "percent"

// MsgID is the JetStream message ID of an item: enqueueing the same batch
// again inside the duplicate window adds nothing. It is batch + "/" + item
// for plain IDs; an ID that a header would not carry as it is, and a batch
// ID holding '/', is percent-encoded (HeaderValue), so that two different
// items never share a message ID: the encoded part holds a '%', a plain
// one none, and the batch part never holds a '/'.
func MsgID(batch, item string) string {
	b, _ := escapeValue(batch, '/')
	i, _ := escapeValue(item, 0)
	return b + "/" + i
}

// HeaderValue returns id as a header carries it, and whether it had to
// be encoded. nats.go trims white space off both ends of a header value
// and turns CR and LF into spaces, and the server drops the leading spaces
// of a message ID: an ID with white space at either end or a control
// character would arrive changed, and two items would become one. Such an
// ID is percent-encoded: its leading and trailing spaces, its control
// characters (below 0x20 and 0x7F) and its '%' become "%XX" (upper-case
// hex); every other byte, UTF-8 included, stays. A plain ID is returned
// as it is, without allocating.
func HeaderValue(id string) (v string, encoded bool) { return escapeValue(id, 0) }

// IDFromHeader reverses HeaderValue for an encoded value.
func IDFromHeader(v string) (string, error) {
	if strings.IndexByte(v, '%') < 0 {
		return v, nil
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b = append(b, v[i])
			continue
		}
		hi, ok1 := unhex(v, i+1)
		lo, ok2 := unhex(v, i+2)
		if !ok1 || !ok2 {
			return "", fmt.Errorf("queue: bad escape at byte %d of header value %q", i, v)
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func unhex(s string, i int) (byte, bool) {
	if i >= len(s) {
		return 0, false
	}
	switch c := s[i]; {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// escapeValue is HeaderValue that also encodes also (when not 0).
func escapeValue(s string, also byte) (string, bool) {
	lead, trail := spaceRuns(s)
	if lead == 0 && trail == 0 && valueSafe(s, also) {
		return s, false
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*(lead+trail)+8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i < lead || i >= len(s)-trail || !valueByte(c, also) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b), true
}

// spaceRuns counts the spaces s starts and ends with (all of them: both,
// for an ID of spaces only).
func spaceRuns(s string) (lead, trail int) {
	for lead < len(s) && s[lead] == ' ' {
		lead++
	}
	if lead == len(s) {
		return lead, 0
	}
	for trail < len(s) && s[len(s)-1-trail] == ' ' {
		trail++
	}
	return lead, trail
}

// valueSafe reports whether every byte of s is a valueByte.
func valueSafe(s string, also byte) bool {
	for i := 0; i < len(s); i++ {
		if !valueByte(s[i], also) {
			return false
		}
	}
	return true
}

// valueByte: the bytes a header value keeps as they are, anywhere.
func valueByte(c, also byte) bool {
	return c >= 0x20 && c != 0x7F && c != '%' && (also == 0 || c != also)
}

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

// MaxTenantLen bounds a tenant's name.
const MaxTenantLen = 64

// CheckTenant reports whether name can name a tenant: 1 to MaxTenantLen
// letters, digits, '_', '.' or '-' (it is a metric label and a key).
func CheckTenant(name string) error {
	if name == "" || len(name) > MaxTenantLen {
		return fmt.Errorf("tenant %q: want 1 to %d letters, digits, '_', '.' or '-'", name, MaxTenantLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("tenant %q: want 1 to %d letters, digits, '_', '.' or '-'", name, MaxTenantLen)
		}
	}
	return nil
}

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

// Kinds are the built-in job kinds a worker can run (jobs.Names); a
// kind is a token of its items' subjects (<prefix>.b.<batch>.<kind>).
var Kinds = jobs.Names()

// CheckKind reports whether kind is a known job kind: a built-in one
// (jobs.Lookup) or one of named, the configuration's named kinds
// (jobs.kinds).
func CheckKind(kind string, named ...string) error {
	if _, ok := jobs.Lookup(kind); ok || slices.Contains(named, kind) {
		return nil
	}
	if len(named) == 0 {
		return fmt.Errorf("unknown job kind %q (want one of %s)", kind, strings.Join(Kinds, ", "))
	}
	named = slices.Sorted(slices.Values(named))
	return fmt.Errorf("unknown job kind %q (want one of %s, or a kind the configuration names under jobs.kinds: %s)",
		kind, strings.Join(Kinds, ", "), strings.Join(named, ", "))
}

var errNoHeader = errors.New("queue: message lacks header")

func (q *Queue) resultsSubjects() string { return q.cfg.SubjectPrefix + ".results.>" }
func (q *Queue) dlqSubjects() string     { return q.cfg.SubjectPrefix + ".dlq.>" }
func (q *Queue) resultsStream() string   { return q.cfg.Stream + "_RESULTS" }
func (q *Queue) dlqStream() string       { return q.cfg.Stream + "_DLQ" }
func (q *Queue) workersBucket() string   { return q.cfg.Stream + "_WORKERS" }
func (q *Queue) batchesBucket() string   { return q.cfg.Stream + "_BATCHES" }

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
