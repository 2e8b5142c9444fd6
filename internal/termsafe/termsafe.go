// Package termsafe makes text that comes from jobs, APIs and items (errors,
// reasons, IDs) safe to print on a terminal or in a one-line field of a
// plain-text table: a job's stderr must not be able to recolour, retitle or
// redraw the operator's terminal, nor break a table's layout.
package termsafe

import (
	"strings"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// String returns s with every byte or character that a terminal could act
// on, or that would break a one-line field, replaced by a visible escape:
//
//	\t \n \r    tab, line feed, carriage return
//	\xNN        the other C0 controls (ESC is \x1b, BEL \x07), DEL (\x7f),
//	            and each byte that is not part of valid UTF-8
//	\u{NNNN}    C1 controls (U+0080–U+009F: U+009B is a CSI, U+009D an OSC
//	            to some terminals), bidirectional controls that can make
//	            text read other than it is (U+061C, U+200E, U+200F,
//	            U+202A–U+202E, U+2066–U+2069), and the line and paragraph
//	            separators U+2028 and U+2029
//
// Everything else is kept as it is, backslashes included: the result is
// for reading, not for parsing back. When nothing needs escaping, String
// returns s itself without allocating.
func String(s string) string { return escape(s, false) }

// Lines is String for text of several lines, such as an error that lists
// one problem a line: its line feeds are kept, everything else is escaped
// as String escapes it.
func Lines(s string) string { return escape(s, true) }

// escape is String, or Lines when keepLF.
func escape(s string, keepLF bool) string {
	i := firstUnsafe(s, keepLF)
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if unsafeASCII(c, keepLF) {
				writeByte(&b, c)
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			writeByte(&b, c)
		case unsafeRune(r):
			writeRune(&b, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// firstUnsafe is the index of the first byte of s that escape escapes, or
// len(s).
func firstUnsafe(s string, keepLF bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if unsafeASCII(c, keepLF) {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafeRune(r) {
			return i
		}
		i += size
	}
	return len(s)
}

func unsafeASCII(c byte, keepLF bool) bool {
	return (c < 0x20 || c == 0x7f) && !(keepLF && c == '\n')
}

// unsafeRune reports whether a non-ASCII rune is escaped.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// writeByte writes an ASCII control or a stray byte as \t, \n, \r or \xNN.
func writeByte(b *strings.Builder, c byte) {
	switch c {
	case '\t':
		b.WriteString(`\t`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	default:
		b.WriteString(`\x`)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
}

// writeRune writes r as \u{NNNN} (at least four hex digits).
func writeRune(b *strings.Builder, r rune) {
	b.WriteString(`\u{`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
	b.WriteByte('}')
}

// JSON returns JSON text b with every character String escapes as
// \u{NNNN} (C1 and bidirectional controls) written as a JSON \uNNNN
// escape instead: the same JSON value, which a terminal shows without
// acting on it. Go's encoder already escapes the C0 controls and U+2028,
// U+2029; such characters can only occur inside strings of valid JSON,
// so the result is valid wherever b is. When nothing needs escaping, JSON
// returns b itself.
func JSON(b []byte) []byte {
	i := firstUnsafeJSON(b)
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if size > 1 && unsafeRune(r) {
			out = append(out, '\\', 'u', hexDigits[(r>>12)&0xf], hexDigits[(r>>8)&0xf], hexDigits[(r>>4)&0xf], hexDigits[r&0xf])
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

// firstUnsafeJSON is the index of the first rune JSON escapes, or len(b).
func firstUnsafeJSON(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if size > 1 && unsafeRune(r) {
			return i
		}
		i += size
	}
	return len(b)
}
