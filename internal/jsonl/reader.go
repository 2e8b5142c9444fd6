// Package jsonl reads work items from JSON Lines: one JSON object per line,
// each naming its item ID in a field. It streams: memory holds one line at
// a time (at most Options.MaxLine bytes, however long the input line) and
// 8 bytes per ID for duplicate detection (see IDs).
//
// Every problem with a line is a *LineError naming the line number and,
// where it could be read, the ID; it wraps one of the Err* values. After a
// LineError the Reader goes on with the next line, so a caller can report
// every problem of an input in one pass. Other errors (from the underlying
// io.Reader) end the reading.
//
// The package also holds the JSON pieces hot paths read and write without
// reflection: Field and Cost scan one field of an object in place;
// AppendString and AppendFloat write what encoding/json writes.
//
// Rules:
//   - a line holding only spaces, tabs or a carriage return is skipped (it
//     still counts for the line numbers); a UTF-8 byte order mark at the
//     start of the input is ignored;
//   - every other line must be valid UTF-8 and one JSON object;
//   - the ID is the value of the field Options.IDField at the top level of
//     the object: a non-empty string, or an integer number, whose text is
//     the ID ("7" for 7, "-3" for -3). null, booleans, objects, arrays and
//     numbers with a fraction or an exponent are errors; so is a field
//     given twice;
//   - each ID appears once in the input; a later line with the same ID is
//     an ErrDuplicateID naming the first line. Duplicates are found after
//     the input is read, not by Next: Reader.Duplicates reads the input
//     again for the few IDs whose hashes collide and reports each repeat.
package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// DefaultMaxLine is the default Options.MaxLine: 1 MiB, NATS's default max
// payload.
const DefaultMaxLine = 1 << 20

// Options configure a Reader.
type Options struct {
	// IDField is the top-level field holding the item ID (default "id").
	IDField string
	// MaxLine bounds the bytes of one line, its line break excluded
	// (default DefaultMaxLine). A longer line is an ErrTooLong; it is
	// skipped without being held in memory whole.
	MaxLine int
	// CheckID, if set, vets each ID; its error becomes an ErrBadID whose
	// detail is the error's text.
	CheckID func(id string) error
	// AllowDuplicates turns duplicate detection off (and with it the memory
	// it takes): for a second pass over an input already checked.
	AllowDuplicates bool
	// hash replaces the IDs set's first hash (a test seam: see
	// export_test.go).
	hash func(string) uint64
	// CostField, when set, is the top-level field holding an item's
	// estimated cost (see Cost); CostDefault is the cost of an item
	// without it.
	CostField   string
	CostDefault int64
	// ScopeField, when set, is the top-level field holding an item's
	// scope (see Scope); CheckScope, if set, vets a scope an item has
	// (its error becomes an ErrBadScope).
	ScopeField string
	CheckScope func(scope string) error
}

// Item is one valid line.
type Item struct {
	// Line is the 1-based line number.
	Line int
	// ID is the item ID.
	ID string
	// Raw is the JSON object with the surrounding blanks removed. It is
	// valid only until the next call to Next: copy it to keep it.
	Raw []byte
	// Cost is the item's estimated cost, when Options.CostField is set.
	Cost int64
	// Scope is the item's scope, when Options.ScopeField is set and the
	// item has one.
	Scope string
}

// Reader reads items; see the package documentation. Not safe for
// concurrent use.
type Reader struct {
	r     *bufio.Reader
	opts  Options
	ids   *IDs
	line  int
	items int
	err   error // sticky: io error or io.EOF
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// NewReader returns a Reader of r.
func NewReader(r io.Reader, opts Options) (*Reader, error) {
	if opts.IDField == "" {
		opts.IDField = "id"
	}
	if opts.MaxLine == 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.MaxLine < 0 {
		return nil, fmt.Errorf("jsonl: MaxLine must be positive, got %d", opts.MaxLine)
	}
	if !utf8.ValidString(opts.IDField) {
		return nil, fmt.Errorf("jsonl: IDField %q is not valid UTF-8", opts.IDField)
	}
	rd := &Reader{
		// Room for the line and a CRLF: a line that fills the buffer
		// without its line break is too long.
		r:    bufio.NewReaderSize(r, opts.MaxLine+2),
		opts: opts,
	}
	if !opts.AllowDuplicates {
		rd.ids = NewIDs()
		if opts.hash != nil {
			rd.ids.hash = opts.hash
		}
	}
	return rd, nil
}

// Next returns the next item. At the end of the input it returns io.EOF; a
// problem with a line is a *LineError (call Next again for the next line);
// any other error is the underlying reader's, and final.
func (r *Reader) Next() (Item, error) {
	for {
		if r.err != nil {
			return Item{}, r.err
		}
		raw, err := r.r.ReadSlice('\n')
		if len(raw) == 0 && err != nil {
			r.setErr(err)
			continue
		}
		r.line++
		if errors.Is(err, bufio.ErrBufferFull) {
			return Item{}, r.tooLong(raw)
		}
		if err != nil {
			r.setErr(err) // the last line had no line break; take it
		}
		if r.line == 1 {
			raw = bytes.TrimPrefix(raw, bom)
		}
		obj := bytes.Trim(raw, " \t\r\n")
		if len(obj) == 0 {
			continue
		}
		if len(obj) > r.opts.MaxLine {
			return Item{}, &LineError{Line: r.line, Err: ErrTooLong, ID: findID(obj, r.opts.IDField).id,
				Detail: fmt.Sprintf("the line is %d bytes long, at most %d", len(obj), r.opts.MaxLine)}
		}
		it, lerr := r.item(obj)
		if lerr != nil {
			return Item{}, lerr
		}
		r.items++
		return it, nil
	}
}

func (r *Reader) setErr(err error) {
	if err == io.EOF {
		r.err = io.EOF
		return
	}
	r.err = fmt.Errorf("jsonl: read after line %d: %w", r.line, err)
}

// item checks one non-blank line.
func (r *Reader) item(obj []byte) (Item, *LineError) {
	fail := func(e error, id, detail string) (Item, *LineError) {
		return Item{}, &LineError{Line: r.line, ID: id, Err: e, Detail: detail}
	}
	if !utf8.Valid(obj) {
		return fail(ErrNotUTF8, "", badUTF8(obj))
	}
	if !json.Valid(obj) {
		return fail(ErrSyntax, "", syntaxDetail(obj))
	}
	sc := findID(obj, r.opts.IDField)
	switch {
	case sc.problem != nil:
		return fail(sc.problem, "", sc.detail)
	case !sc.found:
		return fail(ErrNoID, "", fmt.Sprintf("no field %q", r.opts.IDField))
	case sc.id == "":
		return fail(ErrEmptyID, "", fmt.Sprintf("field %q is empty", r.opts.IDField))
	}
	if r.opts.CheckID != nil {
		if err := r.opts.CheckID(sc.id); err != nil {
			return fail(ErrBadID, sc.id, err.Error())
		}
	}
	var cost int64
	if r.opts.CostField != "" {
		c, err := Cost(obj, r.opts.CostField, r.opts.CostDefault)
		if err != nil {
			return fail(ErrBadCost, sc.id, strings.TrimPrefix(err.Error(), ErrBadCost.Error()+": "))
		}
		cost = c
	}
	var scope string
	if r.opts.ScopeField != "" {
		s, ok, err := Scope(obj, r.opts.ScopeField)
		if err != nil {
			return fail(ErrBadScope, sc.id, strings.TrimPrefix(err.Error(), ErrBadScope.Error()+": "))
		}
		if ok && r.opts.CheckScope != nil {
			if err := r.opts.CheckScope(s); err != nil {
				return fail(ErrBadScope, sc.id, fmt.Sprintf("field %q %v", r.opts.ScopeField, err))
			}
		}
		scope = s
	}
	if r.ids != nil {
		r.ids.add(sc.id)
	}
	return Item{Line: r.line, ID: sc.id, Raw: obj, Cost: cost, Scope: scope}, nil
}

// tooLong reports a line longer than the buffer and skips the rest of it.
// The ID is taken from the first bytes when it is there.
func (r *Reader) tooLong(head []byte) error {
	if r.line == 1 {
		head = bytes.TrimPrefix(head, bom)
	}
	e := &LineError{Line: r.line, Err: ErrTooLong, ID: findID(head, r.opts.IDField).id}
	n, last := int64(len(head)), head
	for {
		chunk, err := r.r.ReadSlice('\n')
		n += int64(len(chunk))
		if len(chunk) > 0 {
			last = chunk
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			r.setErr(err)
		}
		break
	}
	n -= int64(len(last) - len(bytes.TrimRight(last, "\r\n")))
	e.Detail = fmt.Sprintf("the line is %d bytes long, at most %d", n, r.opts.MaxLine)
	return e
}

// Line is the number of lines read so far.
func (r *Reader) Line() int { return r.line }

// Items is the number of valid items returned so far.
func (r *Reader) Items() int { return r.items }

// IDs is the set of IDs seen so far (nil with AllowDuplicates).
func (r *Reader) IDs() *IDs { return r.ids }

// Duplicates finds the repeated IDs of the input this Reader has read to
// its end: again must give the same bytes once more. It calls fn with an
// ErrDuplicateID LineError for each line whose ID an earlier line has, in
// line order, naming that first line; the comparison is exact. Only when
// some hashes of the set collide (IDs.Suspects) is again read at all, and
// then only the suspect IDs are kept, so the memory is that of the
// repeated IDs. It returns again's read error, or an error when again is
// not the same input (a different number of items).
func (r *Reader) Duplicates(again io.Reader, fn func(*LineError)) error {
	if r.ids == nil {
		return errors.New("jsonl: Duplicates on a Reader with AllowDuplicates")
	}
	if r.err != io.EOF {
		return errors.New("jsonl: Duplicates before the input was read to its end")
	}
	if r.ids.Suspects() == 0 {
		return nil
	}
	opts := r.opts
	opts.AllowDuplicates = true
	rd, err := NewReader(again, opts)
	if err != nil {
		return err
	}
	first := map[string]int{}
	for {
		it, err := rd.Next()
		if err == io.EOF {
			break
		}
		var le *LineError
		if errors.As(err, &le) {
			continue // not an item, as on the first reading
		}
		if err != nil {
			return err
		}
		if !r.ids.suspect(r.ids.hash(it.ID)) {
			continue
		}
		if line, ok := first[it.ID]; ok {
			fn(&LineError{Line: it.Line, ID: it.ID, Err: ErrDuplicateID, FirstLine: line})
			continue
		}
		first[it.ID] = it.Line
	}
	if rd.Items() != r.items {
		return fmt.Errorf("jsonl: the input read again has %d items, not %d", rd.Items(), r.items)
	}
	return nil
}

// badUTF8 says where the first invalid byte is.
func badUTF8(b []byte) string {
	for i := 0; i < len(b); {
		c, size := utf8.DecodeRune(b[i:])
		if c == utf8.RuneError && size <= 1 {
			return fmt.Sprintf("invalid byte 0x%02X at column %d (is the file in another encoding?)", b[i], i+1)
		}
		i += size
	}
	return ""
}

// syntaxDetail returns encoding/json's description of the syntax error,
// with its column.
func syntaxDetail(b []byte) string {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (column %d)", se.Error(), se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "invalid JSON"
}
