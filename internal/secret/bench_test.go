package secret_test

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// benchKeys returns n secrets of 40–60 random characters.
func benchKeys(n int, rng *rand.Rand) []secret.Secret {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/+=.~"
	out := make([]secret.Secret, n)
	for i := range out {
		b := make([]byte, 40+rng.IntN(21))
		for j := range b {
			b[j] = chars[rng.IntN(len(chars))]
		}
		out[i] = secret.New(string(b))
	}
	return out
}

// benchText returns 1 MiB of log-like text with, about every 16 KiB, one
// of keys in one of the forms a job prints it.
func benchText(keys []secret.Secret, rng *rand.Rand) []byte {
	const words = "the quick brown fox jumps over the lazy dog 0123456789 HTTP/1.1 200 OK {\"id\":42}\n"
	text := make([]byte, 0, 1<<20+4096)
	for len(text) < 1<<20 {
		if rng.IntN(2000) == 0 {
			k := keys[rng.IntN(len(keys))].Reveal()
			js, _ := json.Marshal(k)
			switch rng.IntN(4) {
			case 0:
				text = append(text, k...)
			case 1:
				text = append(text, "> Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("user:"+k))+"\r\n"...)
			case 2:
				text = append(text, "GET /v1?key="+url.QueryEscape(k)+" HTTP/1.1\n"...)
			default:
				text = append(text, `{"key":`+string(js)+"}\n"...)
			}
			continue
		}
		i := rng.IntN(len(words) - 8)
		text = append(text, words[i:i+8]...)
	}
	return text
}

func benchScrub(b *testing.B, keys int, withSecrets bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	ks := benchKeys(keys, rng)
	sc := secret.NewScrubber(ks...)
	text := benchText(benchKeys(1, rng), rng) // holds none of ks
	if withSecrets {
		text = benchText(ks, rng)
		if string(sc.Bytes(text)) == string(text) {
			b.Fatal("the text holds no secret")
		}
	}
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		_ = sc.Bytes(text)
	}
}

func BenchmarkScrub10Keys1MiB(b *testing.B)        { benchScrub(b, 10, true) }
func BenchmarkScrub1000Keys1MiB(b *testing.B)      { benchScrub(b, 1000, true) }
func BenchmarkScrubClean10Keys1MiB(b *testing.B)   { benchScrub(b, 10, false) }
func BenchmarkScrubClean1000Keys1MiB(b *testing.B) { benchScrub(b, 1000, false) }

// BenchmarkNewScrubber1000Keys is the cost of building the automaton, paid
// once per worker start; BenchmarkNewScrubber1Key, per run of a job kind
// given no scrubber (jobs.scrubberFor).
func BenchmarkNewScrubber1000Keys(b *testing.B) { benchNew(b, 1000) }
func BenchmarkNewScrubber1Key(b *testing.B)     { benchNew(b, 1) }

func benchNew(b *testing.B, keys int) {
	ks := benchKeys(keys, rand.New(rand.NewPCG(1, 2)))
	b.ReportAllocs()
	for range b.N {
		_ = secret.NewScrubber(ks...)
	}
}
