package gateway

import (
	"io"
	"mime"
	"net/http"

	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/provider"
)

// usageBodyMax bounds the JSON reply kept to read its usage: a longer one
// goes to the caller all the same, its usage unread.
const usageBodyMax = 4 << 20

// tapMode is what a tap keeps of the body it passes on.
type tapMode uint8

const (
	tapStream tapMode = iota // a 2xx stream: its usage events, read as they pass
	tapJSON                  // a 2xx reply: the body, up to usageBodyMax, for its usage
	tapHead                  // another reply: its start, for its judgement (jobs.ReplyError)
)

// tap is a reply's body as the proxy copies it to the caller: it passes
// every byte on as it comes and reads what the settlement needs on the
// way. It is read by the proxy's goroutine alone.
type tap struct {
	body   io.ReadCloser
	mode   tapMode
	stream provider.StreamUsage
	buf    []byte
	over   bool  // the JSON reply outgrew usageBodyMax
	eof    bool  // the body was read to its end
	err    error // what ended the read before its end
}

// newTap wraps res's body.
func newTap(res *http.Response) *tap {
	t := &tap{body: res.Body, mode: tapHead}
	if res.StatusCode >= 200 && res.StatusCode <= 299 {
		t.mode = tapJSON
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
			t.mode = tapStream
		} else if res.ContentLength > 0 && res.ContentLength <= usageBodyMax {
			t.buf = make([]byte, 0, res.ContentLength)
		}
	}
	return t
}

func (t *tap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if n > 0 {
		t.keep(p[:n])
	}
	switch {
	case err == io.EOF:
		t.eof = true
	case err != nil:
		t.err = err
	}
	return n, err
}

func (t *tap) Close() error { return t.body.Close() }

func (t *tap) keep(b []byte) {
	switch t.mode {
	case tapStream:
		_, _ = t.stream.Write(b)
	case tapJSON:
		if t.over {
			return
		}
		if len(t.buf)+len(b) > usageBodyMax {
			t.over, t.buf = true, nil
			return
		}
		t.buf = append(t.buf, b...)
	case tapHead:
		if room := jobs.ReplyBodyMax - len(t.buf); room > 0 {
			t.buf = append(t.buf, b[:min(room, len(b))]...)
		}
	}
}

// usage is what a 2xx reply said it used (nil: it did not say, or was
// not read whole).
func (t *tap) usage() *provider.Usage {
	var u provider.Usage
	var ok bool
	switch t.mode {
	case tapStream:
		_ = t.stream.Close()
		u, ok = t.stream.Usage()
	case tapJSON:
		if t.eof && !t.over {
			u, ok = provider.ReadUsage(t.buf)
		}
	}
	if !ok {
		return nil
	}
	return &u
}
