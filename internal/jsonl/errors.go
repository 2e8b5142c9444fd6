package jsonl

import (
	"errors"
	"fmt"
	"strings"
)

// The problems a line can have. A *LineError wraps exactly one of them;
// test with errors.Is.
var (
	// ErrSyntax: the line is not valid JSON.
	ErrSyntax = errors.New("jsonl: malformed JSON")
	// ErrNotObject: the line is valid JSON but not an object.
	ErrNotObject = errors.New("jsonl: not a JSON object")
	// ErrNoID: the object has no ID field.
	ErrNoID = errors.New("jsonl: no ID")
	// ErrEmptyID: the ID is the empty string.
	ErrEmptyID = errors.New("jsonl: empty ID")
	// ErrBadID: the ID is neither a string nor an integer, the field is
	// given twice, or Options.CheckID rejected it.
	ErrBadID = errors.New("jsonl: bad ID")
	// ErrDuplicateID: an earlier line has the same ID.
	ErrDuplicateID = errors.New("jsonl: duplicate ID")
	// ErrTooLong: the line is longer than Options.MaxLine (or the caller
	// found the item too large to send).
	ErrTooLong = errors.New("jsonl: item too large")
	// ErrNotUTF8: the line is not valid UTF-8.
	ErrNotUTF8 = errors.New("jsonl: not valid UTF-8")
)

// LineError is a problem with one line of the input. The reader stays
// usable after returning one: the next call reads the next line.
type LineError struct {
	// Line is the 1-based line number (blank lines count).
	Line int
	// ID is the item's ID when it could be read, else "".
	ID string
	// Err is one of the Err* problems of this package.
	Err error
	// Detail says more, such as the JSON error or the size; may be "".
	Detail string
	// FirstLine is, for ErrDuplicateID, the line where the ID was first seen.
	FirstLine int
}

// maxIDShown bounds an ID quoted in an error message.
const maxIDShown = 80

func (e *LineError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d: ", e.Line)
	if e.ID != "" {
		fmt.Fprintf(&b, "item %s: ", QuoteID(e.ID))
	}
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "jsonl: "))
	if e.FirstLine > 0 {
		fmt.Fprintf(&b, " (first on line %d)", e.FirstLine)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

func (e *LineError) Unwrap() error { return e.Err }

// QuoteID quotes an ID for a message, shortened when long.
func QuoteID(id string) string {
	if len(id) <= maxIDShown {
		return fmt.Sprintf("%q", id)
	}
	return fmt.Sprintf("%q…", id[:maxIDShown])
}
