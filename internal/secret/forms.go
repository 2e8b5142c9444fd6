package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
)

// minBase64Core is the shortest base64 core matched. A secret's base64
// core is about 4/3 of its length less the two partial characters, so
// this takes secrets of 7 bytes or more. Shorter cores are skipped: a
// 4-byte secret's core is 4 or 5 characters (24–30 bits), which random
// base64 (a hash, an image in a JSON body) holds by chance about every
// few MiB, and a match redacts the whole base64 run around it. 8
// characters are 48 bits: a chance match is not to be expected. (A 6-byte
// secret has one 8-character core, at offset 0, and two of 7: it is left
// out too, rather than caught at one alignment in three.)
const minBase64Core = 8

// formsOf returns the texts in which a job may print secret v: raw,
// URL-encoded (query and path escaping, upper- and lower-case hex),
// JSON-escaped (with and without HTML escaping), and the base64 cores
// (standard and URL alphabets, each of the 3 alignments). Duplicates are
// left in: they end in the same state of the automaton.
func formsOf(v string) []form {
	out := []form{{text: v}}
	for _, esc := range []string{url.QueryEscape(v), url.PathEscape(v)} {
		out = append(out, form{text: esc}, form{text: lowerHex(esc)})
	}
	js, _ := json.Marshal(v) // a string always marshals
	out = append(out, form{text: string(js[1 : len(js)-1])})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	js = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	out = append(out, form{text: string(js[1 : len(js)-1])})
	for _, core := range base64Cores(v) {
		out = append(out, form{text: core, base64: true})
		urlCore := strings.NewReplacer("+", "-", "/", "_").Replace(core)
		out = append(out, form{text: urlCore, base64: true})
	}
	return out
}

// base64Cores returns, for each of the 3 offsets mod 3 at which v may
// start inside encoded data ("Basic " + base64("user:" + v)), the run of
// standard-alphabet characters that depends on v's bytes alone: the
// characters that also hold bits of the bytes before or after v are
// dropped. If one of them is shorter than minBase64Core, there are none:
// a secret is caught in base64 at every alignment or at none.
func base64Cores(v string) []string {
	var cores []string
	n := len(v)
	for k := range 3 {
		data := make([]byte, k, k+n)
		enc := base64.RawStdEncoding.EncodeToString(append(data, v...))
		// Character c holds bits [6c, 6c+6) of the data; v has bits
		// [8k, 8(k+n)).
		from, to := (8*k+5)/6, 8*(k+n)/6
		if to-from < minBase64Core {
			return nil
		}
		cores = append(cores, enc[from:to])
	}
	return cores
}

// lowerHex turns the hex digits of %-escapes to lower case ("%2F" →
// "%2f"), as some encoders write them.
func lowerHex(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = toLower(b[i+1]), toLower(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func toLower(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// isBase64 reports whether c is in the standard or the URL alphabet.
func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '+' || c == '/' || c == '-' || c == '_'
}
