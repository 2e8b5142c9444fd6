// Package fuzzreply turns fuzzer bytes into the values go-redis returns
// for a Lua script's reply — int64, string, nil, []any, and the RESP3
// float64 and bool — nested to any depth, so that reply decoders can be
// fuzzed with arbitrary shapes. Encode writes a value in the same format,
// for seed corpora.
//
// Format, one value: a tag byte, then
//
//	'i' 8 bytes big-endian  int64
//	's' 1 length byte, data  string (truncated at the end of the input)
//	'f' 8 bytes             float64 (IEEE bits: NaN and infinities included)
//	'b' 1 byte              bool
//	'n'                     nil
//	'a' 1 count byte, values []any
//
// Any other tag byte becomes a one-byte string of itself; the end of the
// input ends every open array early. Every byte sequence decodes.
package fuzzreply

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// maxDepth bounds nesting; deeper arrays come out empty.
const maxDepth = 12

// Decode decodes data into one value.
func Decode(data []byte) any {
	d := &decoder{b: data}
	return d.value(0)
}

type decoder struct {
	b []byte
}

func (d *decoder) take(n int) []byte {
	n = min(n, len(d.b))
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) fixed8() []byte {
	var buf [8]byte
	copy(buf[:], d.take(8))
	return buf[:]
}

func (d *decoder) value(depth int) any {
	if len(d.b) == 0 {
		return nil
	}
	tag := d.take(1)[0]
	switch tag {
	case 'i':
		return int64(binary.BigEndian.Uint64(d.fixed8()))
	case 's':
		n := 0
		if l := d.take(1); len(l) == 1 {
			n = int(l[0])
		}
		return string(d.take(n))
	case 'f':
		return math.Float64frombits(binary.BigEndian.Uint64(d.fixed8()))
	case 'b':
		b := d.take(1)
		return len(b) == 1 && b[0]&1 == 1
	case 'n':
		return nil
	case 'a':
		n := 0
		if l := d.take(1); len(l) == 1 {
			n = int(l[0])
		}
		out := make([]any, 0, min(n, 16))
		for i := 0; i < n && len(d.b) > 0 && depth < maxDepth; i++ {
			out = append(out, d.value(depth+1))
		}
		return out
	default:
		return string([]byte{tag})
	}
}

// Encode writes v in Decode's format. It takes the types Decode returns
// (and int, for convenience); strings and arrays longer than 255 are
// truncated. Any other type is an error.
func Encode(v any) ([]byte, error) {
	var out []byte
	var enc func(v any) error
	enc = func(v any) error {
		switch x := v.(type) {
		case nil:
			out = append(out, 'n')
		case int:
			out = binary.BigEndian.AppendUint64(append(out, 'i'), uint64(x))
		case int64:
			out = binary.BigEndian.AppendUint64(append(out, 'i'), uint64(x))
		case float64:
			out = binary.BigEndian.AppendUint64(append(out, 'f'), math.Float64bits(x))
		case bool:
			b := byte(0)
			if x {
				b = 1
			}
			out = append(out, 'b', b)
		case string:
			if len(x) > 255 {
				x = x[:255]
			}
			out = append(append(out, 's', byte(len(x))), x...)
		case []any:
			if len(x) > 255 {
				x = x[:255]
			}
			out = append(out, 'a', byte(len(x)))
			for _, e := range x {
				if err := enc(e); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("fuzzreply: cannot encode %T", v)
		}
		return nil
	}
	if err := enc(v); err != nil {
		return nil, err
	}
	return out, nil
}

// MustEncode is Encode for seeds written in the test: it panics on a type
// Encode does not take.
func MustEncode(v any) []byte {
	b, err := Encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzDecoder fuzzes a reply decoder: f is seeded with the encodings of
// seeds, decode gets every reply the fuzzer's bytes decode to (it may
// refuse any, never panic), and check every reply decode accepts, with
// what it made of it.
func FuzzDecoder[T any](f *testing.F, seeds []any, decode func(any) (T, error), check func(t *testing.T, reply any, got T)) {
	for _, v := range seeds {
		f.Add(MustEncode(v))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := Decode(data)
		got, err := decode(v)
		if err != nil {
			return
		}
		check(t, v, got)
	})
}
