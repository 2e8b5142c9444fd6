package jsonl

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrBadCost: the item's cost field is not a number of at least 0.
var ErrBadCost = errors.New("jsonl: bad cost")

// Field returns the raw JSON value of the top-level field of the object in
// obj (valid JSON), and whether it is there. A field given more than once
// has its last value, as the APIs' own JSON decoders take it (Python's
// json, Go's encoding/json): an item is charged and scoped by the value
// the API reads.
func Field(obj []byte, field string) (value []byte, found bool) {
	s := scanner{b: obj}
	s.space()
	if s.eof() || s.b[s.i] != '{' {
		return nil, false
	}
	s.i++
	for {
		s.space()
		if s.eof() {
			return value, found
		}
		switch s.b[s.i] {
		case '}':
			return value, found
		case ',':
			s.i++
			continue
		case '"':
		default:
			return value, found
		}
		kStart := s.i
		if !s.skipString() {
			return value, found
		}
		key := s.b[kStart:s.i]
		s.space()
		if s.eof() || s.b[s.i] != ':' {
			return value, found
		}
		s.i++
		s.space()
		vStart := s.i
		if !s.skipValue() || s.i == vStart {
			return value, found
		}
		if keyIs(key, field) {
			value, found = s.b[vStart:s.i], true
		}
	}
}

// Cost returns an item's estimated cost, for the pool's cost limits: the
// number in its top-level field (fractions round up; 0 counts as 1), else
// def. A value that is not a non-negative number is an ErrBadCost naming
// the field.
func Cost(obj []byte, field string, def int64) (int64, error) {
	raw, ok := Field(obj, field)
	if !ok || string(raw) == "null" {
		return def, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || raw[0] == '"' {
		return 0, fmt.Errorf("%w: field %q is %s, want a number", ErrBadCost, field, describe(raw[0]))
	}
	if f < 0 || math.IsInf(f, 0) || f > math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: field %q is %s, want a number from 0 to %d", ErrBadCost, field, raw, int64(math.MaxInt64/2))
	}
	return max(int64(math.Ceil(f)), 1), nil
}
