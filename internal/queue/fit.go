package queue

import (
	"fmt"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/jsonl"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// recordSlack is what a record leaves of the server's max payload for the
// message's subject and protocol framing.
const recordSlack = 1 << 10

// CutNote ends a text that was cut so that its record fits the server's
// max payload.
const CutNote = " […cut to fit the server's max payload]"

// recordLimit is the largest record (encoded) a Queue stores: the
// server's max payload less recordSlack.
func (q *Queue) recordLimit() int {
	return max(int(q.nc.MaxPayload())-recordSlack, 4<<10)
}

// fitResult encodes r, cutting its error to an eighth of limit, then its
// output, then the rest of its error until the record is at most limit
// bytes; a cut output is marked OutputTruncated, a cut error ends with
// CutNote.
func fitResult(r kftype.Result, limit int) ([]byte, error) {
	encode := func() ([]byte, error) { return r.AppendJSON(nil) }
	data, err := encode()
	if err != nil || len(data) <= limit {
		return data, err
	}
	r.Error = capText(r.Error, limit/8)
	if data, err = encode(); err != nil || len(data) <= limit {
		return data, err
	}
	if r.Output != "" {
		r.OutputTruncated = true
		if data, err = shrink(encode, &r.Output, "", r.OutputEncoding == "base64", limit); err != nil || len(data) <= limit {
			return data, err
		}
	}
	if r.Error != "" {
		if data, err = shrink(encode, &r.Error, CutNote, false, limit); err != nil || len(data) <= limit {
			return data, err
		}
	}
	return nil, fmt.Errorf("queue: the result of %q takes %d bytes with nothing left to cut, more than the %d the server takes", r.Item, len(data), limit)
}

// fitDeadLetter encodes d as fitResult encodes a result: its error is cut
// to an eighth of limit first, then its payload, then the rest of its error (a dead letter whose payload was cut says so in
// PayloadTruncated, holds what was kept as a JSON string, and cannot be
// replayed).
func fitDeadLetter(d kftype.DeadLetter, limit int) ([]byte, error) {
	encode := func() ([]byte, error) { return jsonl.Marshal(d) }
	data, err := encode()
	if err != nil || len(data) <= limit {
		return data, err
	}
	d.Error = capText(d.Error, limit/8)
	if data, err = encode(); err != nil || len(data) <= limit {
		return data, err
	}
	if len(d.Payload) > 0 {
		text := string(d.Payload)
		d.PayloadTruncated = true
		encodeText := func() ([]byte, error) {
			s, err := jsonl.Marshal(text)
			if err != nil {
				return nil, err
			}
			d.Payload = s
			return jsonl.Marshal(d)
		}
		if data, err = shrink(encodeText, &text, "", false, limit); err != nil || len(data) <= limit {
			return data, err
		}
	}
	if d.Error != "" {
		if data, err = shrink(encode, &d.Error, CutNote, false, limit); err != nil || len(data) <= limit {
			return data, err
		}
	}
	return nil, fmt.Errorf("queue: the dead letter of %q takes %d bytes with nothing left to cut, more than the %d the server takes", d.Item, len(data), limit)
}

// shrink cuts *field to the longest start (whole UTF-8 characters, or
// whole base64 quanta) that, followed by note, makes encode's record fit
// limit, and returns that record; the shortest it tries is empty (with
// note). encode reads *field.
func shrink(encode func() ([]byte, error), field *string, note string, base64 bool, limit int) ([]byte, error) {
	whole := *field
	try := func(n int) ([]byte, error) {
		*field = cutText(whole, n, base64) + note
		return encode()
	}
	// Escapes take up to six bytes a byte: the search is over the bytes
	// kept, each try an encoding (this runs only for oversized records).
	lo, hi := 0, len(whole)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		data, err := try(mid)
		if err != nil {
			return nil, err
		}
		if len(data) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return try(lo)
}

// capText keeps at most n bytes of s, ending with CutNote when it was cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutText(s, n-len(CutNote), false) + CutNote
}

// cutText keeps at most n bytes of s (none for n <= 0): whole UTF-8
// characters, or whole base64 quanta of four.
func cutText(s string, n int, base64 bool) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	if base64 {
		return s[:n/4*4]
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
