package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/keyfleet/keyfleet/internal/termsafe"
)

// The CLI's --json output: every command that reports something prints
// exactly one JSON value on standard output, an object for one thing and
// an array for a list, through writeJSON or jsonArray (`results` alone
// writes JSON Lines: queue.WriteResults). Both indent by two spaces, keep
// <, > and & as they are (the output is read by programs and people, not
// embedded in HTML), and pass their bytes through termsafe.JSON, so that
// text a job or an API wrote reaches a terminal with its C1 and bidi
// controls as \u escapes (encoding/json escapes the C0 controls itself).
// Errors stay on standard error.

// show prints a view of v: as the command's one JSON value with --json,
// else as print writes it for people, as of now.
func show[T any](w io.Writer, asJSON bool, v T, print func(io.Writer, T, time.Time)) error {
	if asJSON {
		return writeJSON(w, v)
	}
	print(w, v, time.Now())
	return nil
}

// marshal encodes v as writeJSON prints it, without the final newline;
// prefix starts every line after the first.
func marshal(v any, prefix string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return termsafe.JSON(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// writeJSON prints v as the command's one JSON value.
func writeJSON(w io.Writer, v any) error {
	b, err := marshal(v, "")
	if err != nil {
		return fmt.Errorf("encoding the JSON output: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// jsonArray prints a list as the command's one JSON value, an element at
// a time, as writeJSON prints a slice: a list of any length is streamed.
// Call add for each element, then end (also for none: "[]").
type jsonArray struct {
	w *bufio.Writer
	n int
}

func newJSONArray(w io.Writer) *jsonArray { return &jsonArray{w: bufio.NewWriter(w)} }

func (a *jsonArray) add(v any) error {
	b, err := marshal(v, "  ")
	if err != nil {
		return fmt.Errorf("encoding the JSON output: %w", err)
	}
	sep := ",\n  "
	if a.n == 0 {
		sep = "[\n  "
	}
	a.n++
	_, _ = a.w.WriteString(sep)
	_, err = a.w.Write(b)
	return err
}

func (a *jsonArray) end() error {
	if a.n == 0 {
		_, _ = a.w.WriteString("[]\n")
	} else {
		_, _ = a.w.WriteString("\n]\n")
	}
	return a.w.Flush()
}
