package batchapi

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/provider"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// custom_ids match the providers' pattern and map back to their index,
// and only those keyfleet writes do.
func TestCustomIDs(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	for _, i := range []int{0, 1, 9, 10, 49_999, 99_999} {
		id := CustomID(i)
		if !pattern.MatchString(id) {
			t.Errorf("CustomID(%d) = %q does not match the providers' pattern", i, id)
		}
		if got, ok := customIndex(id); !ok || got != i {
			t.Errorf("customIndex(%q) = %d %v", id, got, ok)
		}
	}
	for _, bad := range []string{"", "r", "x1", "r01", "r-1", "r1a", "item-0001"} {
		if _, ok := customIndex(bad); ok {
			t.Errorf("customIndex(%q) took it", bad)
		}
	}
}

// The chunk's size is the input's exact size, as the provider counts it:
// OpenAI's file, Anthropic's whole request body; a line that would pass
// a bound does not fit, and the count bound holds.
func TestChunkBounds(t *testing.T) {
	payloads := []string{`{"model":"m","messages":[]}`, `{"model":"m", "messages":[{"role":"user","content":"héllo"}]}`, `{"model":"m","x":1}`}
	for _, prov := range []string{provider.OpenAI, provider.Anthropic} {
		var file bytes.Buffer
		c := &chunk{prov: prov, bounds: Bounds{MaxRequests: 3, MaxBytes: 1 << 20}}
		if prov == provider.Anthropic {
			c.size = anthropicWrap
		}
		pr, pw := io.Pipe()
		c.pw = pw
		done := make(chan struct{})
		go func() { _, _ = io.Copy(&file, pr); close(done) }()
		for i, p := range payloads {
			l := inputLine(prov, c.n, "/v1/chat/completions", []byte(p))
			if !c.fits(len(l)) {
				t.Fatalf("%s: line %d does not fit", prov, i)
			}
			if err := c.add(&queue.StagedMsg{Seq: uint64(10 + i), Item: kftype.Item{ID: "item " + string(rune('a'+i))}}, l); err != nil {
				t.Fatal(err)
			}
		}
		pw.Close()
		<-done
		size := int64(file.Len())
		if prov == provider.Anthropic {
			body, _ := io.ReadAll(io.MultiReader(strings.NewReader(`{"requests":[`), &joinLines{r: bufioReader(file.Bytes())}, strings.NewReader(`]}`)))
			if !json.Valid(body) {
				t.Fatalf("anthropic body is not JSON: %s", body)
			}
			var v struct{ Requests []json.RawMessage }
			_ = json.Unmarshal(body, &v)
			if len(v.Requests) != 3 {
				t.Errorf("anthropic body holds %d requests", len(v.Requests))
			}
			size = int64(len(body))
		}
		if c.size != size {
			t.Errorf("%s: chunk size %d, the input is %d bytes", prov, c.size, size)
		}
		if !c.full() || c.fits(1) {
			t.Errorf("%s: 3 requests of 3: full %v, fits another %v", prov, c.full(), c.fits(1))
		}
		if c.first != 10 || c.last != 12 || c.n != 3 {
			t.Errorf("%s: first %d last %d n %d", prov, c.first, c.last, c.n)
		}
		// Each line's request is the payload byte for byte, and its
		// custom_id its index.
		i := 0
		_ = readLines(bytes.NewReader(file.Bytes()), func(l []byte) error {
			req, err := requestOf(prov, l)
			if err != nil || string(req) != payloads[i] {
				t.Errorf("%s: line %d's request %s %v, want %s", prov, i, req, err, payloads[i])
			}
			var v struct {
				CustomID string `json:"custom_id"`
			}
			_ = json.Unmarshal(l, &v)
			if v.CustomID != CustomID(i) {
				t.Errorf("%s: line %d's custom_id %q", prov, i, v.CustomID)
			}
			i++
			return nil
		})
		// The bytes bound: a line one byte over does not fit.
		b := &chunk{prov: prov, bounds: Bounds{MaxRequests: 10, MaxBytes: c.size}}
		if prov == provider.Anthropic {
			b.size = anthropicWrap
		}
		for i, p := range payloads {
			l := inputLine(prov, b.n, "/v1/chat/completions", []byte(p))
			if !b.fits(len(l)) {
				t.Fatalf("%s: line %d does not fit a bound of exactly the input's size", prov, i)
			}
			b.size += b.lineCost(len(l))
			b.n++
		}
		if b.fits(1) || b.fits(2) {
			t.Errorf("%s: a line past MaxBytes fits", prov)
		}
	}
}

// joinLines writes JSON Lines as array elements whatever the reads' sizes.
func TestJoinLines(t *testing.T) {
	in := "{\"a\":1}\n{\"b\":[1,2]}\n\n{\"c\":\"x\"}\n"
	for _, size := range []int{1, 2, 3, 7, 100} {
		j := &joinLines{r: bufioReader([]byte(in))}
		var out bytes.Buffer
		buf := make([]byte, size)
		for {
			n, err := j.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if want := `{"a":1},{"b":[1,2]},{"c":"x"}`; out.String() != want {
			t.Errorf("reads of %d: %q, want %q", size, out.String(), want)
		}
	}
}

// Result lines as the providers write them, and what becomes of their
// items: a success its result; a 4xx fails for good (but 408, 409, 429);
// a 5xx, an expired or canceled request, or none, runs in real time,
// unless the batch was cancelled.
func TestLinesAndFates(t *testing.T) {
	for _, tc := range []struct {
		prov, line string
		typ        string
		status     int
		fate       int
	}{
		{provider.OpenAI, `{"id":"batch_req_1","custom_id":"r0","response":{"status_code":200,"request_id":"req_1","body":{"id":"chatcmpl-1"}},"error":null}`, lineSucceeded, 200, endSucceeded},
		{provider.OpenAI, `{"id":"batch_req_2","custom_id":"r1","response":{"status_code":400,"request_id":"req_2","body":{"error":{"message":"bad"}}},"error":null}`, lineErrored, 400, endFailed},
		{provider.OpenAI, `{"id":"batch_req_3","custom_id":"r2","response":{"status_code":500,"request_id":"req_3","body":{"error":{"message":"oops"}}},"error":null}`, lineErrored, 500, endRealTime},
		{provider.OpenAI, `{"id":"batch_req_4","custom_id":"r3","response":{"status_code":429,"request_id":"req_4","body":{}},"error":null}`, lineErrored, 429, endRealTime},
		{provider.OpenAI, `{"id":"batch_req_5","custom_id":"r4","response":null,"error":{"code":"batch_expired","message":"expired"}}`, lineExpired, 0, endRealTime},
		{provider.Anthropic, `{"custom_id":"r0","result":{"type":"succeeded","message":{"id":"msg_1"}}}`, lineSucceeded, 200, endSucceeded},
		{provider.Anthropic, `{"custom_id":"r1","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}}}`, lineErrored, 400, endFailed},
		{provider.Anthropic, `{"custom_id":"r2","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"busy"}}}}`, lineErrored, 529, endRealTime},
		{provider.Anthropic, `{"custom_id":"r3","result":{"type":"expired"}}`, lineExpired, 0, endRealTime},
		{provider.Anthropic, `{"custom_id":"r4","result":{"type":"canceled"}}`, lineCanceled, 0, endRealTime},
	} {
		parse := openAIOutputLine
		if tc.prov == provider.Anthropic {
			parse = anthropicResultLine
		}
		l, err := parse([]byte(tc.line))
		if err != nil || l.Type != tc.typ || l.Status != tc.status {
			t.Errorf("%s: %+v %v, want %s %d", tc.line, l, err, tc.typ, tc.status)
			continue
		}
		if got := fate(&l, false); got != tc.fate {
			t.Errorf("%s: fate %d, want %d", tc.line, got, tc.fate)
		}
		if tc.fate == endRealTime {
			if got := fate(&l, true); got != endCancelled {
				t.Errorf("%s in a cancelled batch: fate %d, want cancelled", tc.line, got)
			}
		}
	}
	if fate(nil, false) != endRealTime || fate(nil, true) != endCancelled {
		t.Error("an item without a line")
	}
}
