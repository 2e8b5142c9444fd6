package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// idScan is the outcome of looking for the ID field in an object.
type idScan struct {
	id      string
	found   bool
	problem error  // ErrNotObject, ErrBadID (with detail) or nil
	detail  string // for problem
	partial bool   // the input ended before the object did (a prefix)
}

// findID walks the top level of the object in b looking for field. b is
// either a whole line already checked with json.Valid, or the first bytes
// of a line too long to read whole; then the walk stops where b ends
// (partial) and reports what it found before. It never allocates more than
// the ID and the keys that hold escapes.
func findID(b []byte, field string) idScan {
	s := scanner{b: b}
	s.space()
	if s.eof() {
		return idScan{partial: true}
	}
	if s.b[s.i] != '{' {
		return idScan{problem: ErrNotObject, detail: "it is " + describe(s.b[s.i])}
	}
	s.i++
	var out idScan
	for {
		s.space()
		if s.eof() {
			out.partial = true
			return out
		}
		switch s.b[s.i] {
		case '}':
			return out
		case ',':
			s.i++
			continue
		case '"':
		default:
			// Not reachable on valid JSON; on a prefix, the object is
			// malformed and the caller reports the length anyway.
			out.partial = true
			return out
		}
		kStart := s.i
		if !s.skipString() {
			out.partial = true
			return out
		}
		key := s.b[kStart:s.i]
		s.space()
		if s.eof() || s.b[s.i] != ':' {
			out.partial = true
			return out
		}
		s.i++
		s.space()
		vStart := s.i
		if !s.skipValue() || s.i == vStart {
			// The value runs past the prefix (a string or a number cut
			// short is not the ID), or, on a prefix, is missing.
			out.partial = true
			return out
		}
		if !keyIs(key, field) {
			continue
		}
		if out.found || out.problem != nil {
			return idScan{problem: ErrBadID, detail: fmt.Sprintf("field %q appears more than once", field)}
		}
		out.id, out.problem, out.detail = idValue(s.b[vStart:s.i])
		out.found = out.problem == nil
	}
}

// idValue turns the raw value of the ID field into the ID: a string, or an
// integer's text.
func idValue(v []byte) (string, error, string) {
	switch c := v[0]; {
	case c == '"':
		inner := v[1 : len(v)-1]
		if bytes.IndexByte(inner, '\\') < 0 {
			return string(inner), nil, ""
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", ErrBadID, "the ID string does not decode: " + err.Error()
		}
		return s, nil, ""
	case c == '-' || c >= '0' && c <= '9':
		if bytes.ContainsAny(v, ".eE") {
			return "", ErrBadID, fmt.Sprintf("the ID %s is not an integer (want a string or an integer)", v)
		}
		return string(v), nil, ""
	default:
		return "", ErrBadID, "the ID is " + describe(c) + " (want a string or an integer)"
	}
}

// keyIs reports whether the raw JSON string key equals name.
func keyIs(key []byte, name string) bool {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == name
	}
	var s string
	return json.Unmarshal(key, &s) == nil && s == name
}

// describe names the JSON type a value starting with c has.
func describe(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) eof() bool { return s.i >= len(s.b) }

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// skipString moves past the string starting at s.i; false if b ends first.
func (s *scanner) skipString() bool {
	for i := s.i + 1; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			s.i = i + 1
			return true
		}
	}
	return false
}

// skipValue moves past the value starting at s.i; false if b ends first.
func (s *scanner) skipValue() bool {
	if s.eof() {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return true
			}
			s.i++
		}
		return false
	}
}
