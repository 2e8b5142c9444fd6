package config_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/config"
)

// FuzzLoad feeds arbitrary bytes through the decode path Load uses. It must
// never panic; every error line must name the file; a decoded Config must
// survive Validate.
func FuzzLoad(f *testing.F) {
	for _, path := range []string{referencePath, "testdata/design_example.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"",
		"worker: {concurrency: three}",
		"pool:\n  credentials:\n    - &k {id: a, secret_env: A}\n    - {<<: *k, id: b}\n",
		"worker: &w\n  <<: *w\n",
		"a: &a [*a]\n",
		"jobs: {max_output: 64KiB, exec: {command: [x], env: {A: ~}}}",
		"nats: {url: nats://n:4222}\n---\nx: 1\n",
		"? [a]\n: b\n",
		"!!binary aGVsbG8=: 1\n",
		"worker: {retry_backoff: [1s, ~, !!int 3]}\n",
		"queue: {max_deliver: 99999999999999999999}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			for _, line := range errLines(err) {
				if !strings.HasPrefix(line, "config: fuzz.yaml: ") {
					t.Fatalf("error line does not name the file: %q", line)
				}
			}
			return
		}
		if c == nil {
			t.Fatal("nil Config without an error")
		}
		_ = c.Validate()
		_ = c.SecretEnvNames()
	})
}

// TestOddValues puts odd values under every key: each must decode or give
// errors that name the file, never panic.
func TestOddValues(t *testing.T) {
	values := []string{
		"~", "''", "[]", "{}", "[~]", "[[]]", "[{}]", "{a: b}", "-1", "0", "1e3", "0x10", ".inf", "99999999999999999999",
		"yes", "true", "3x", "30s", "-5s", "'30s'", "!!binary aGk=", "!!str 5", "!!int 5", "!!float 1.5", "!!null x",
		"!custom v", "2001-12-14", "[1s, x]", "[a, [b]]", "{<<: {x: 1}}", "{<<: 5}", "&x {}", "64KiB", "'64 KiB'",
		"!!int x", "!!bool maybe", "!!map {}", "!!seq []", "!!str [a]", "!!timestamp x", "!!float x", "!!binary x",
		"{!!int 5: x}", "{[a]: x}", "{~: x}", "{x: 1, x: 2}", "[!!null x]", "{<<: [{}, 5]}", "{<<: !!null x}",
	}
	for _, key := range typePaths(reflect.TypeFor[config.Config]()) {
		for _, v := range values {
			doc := v
			segs := strings.Split(key, ".")
			for i := len(segs) - 1; i >= 0; i-- {
				name, list := strings.CutSuffix(segs[i], "[]")
				if list && i < len(segs)-1 {
					doc = "[" + doc + "]"
				}
				doc = "{" + name + ": " + doc + "}"
			}
			_, err := config.Parse("f.yaml", []byte(doc))
			for _, line := range errLines(err) {
				if !strings.HasPrefix(line, "config: f.yaml: ") {
					t.Errorf("%s: error line does not name the file: %q", doc, line)
				}
			}
		}
	}
}

// Merges of merges must not make the checker walk an exponential tree.
func TestAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("pool:\n  credentials:\n    - &m0 {id: a, secret_env: A}\n")
	for i := 1; i <= 9; i++ {
		refs := strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10)
		fmt.Fprintf(&b, "    - &m%d {<<: [%s]}\n", i, strings.TrimSuffix(refs, ", "))
	}
	start := time.Now()
	_, err := config.Parse("f.yaml", []byte(b.String()))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
	want := "config: f.yaml: line 3: the document expands to too many values (aliases?)"
	if err == nil || err.Error() != want {
		t.Fatalf("want %q, got %v", want, err)
	}
}
