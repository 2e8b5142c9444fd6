package queue

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Message builds the JetStream message an item is published as: its
// batch's subject (or its staging subject), payload and headers.
func (q *Queue) Message(it kftype.Item) *nats.Msg {
	subject := q.batchSubject(it.Batch, it.Kind, it.Scope)
	if it.Staged {
		subject = q.StagingSubject(it.Batch, it.Kind, it.Scope, it.Endpoint)
	}
	m := nats.NewMsg(subject)
	m.Data = it.Payload
	m.Header = header(it)
	return m
}

// header is the message header of an item.
func header(it kftype.Item) nats.Header {
	h := nats.Header{}
	item, itemEnc := HeaderValue(it.ID)
	batch, batchEnc := HeaderValue(it.Batch)
	h.Set(HeaderItem, item)
	h.Set(HeaderBatch, batch)
	scope, scopeEnc := HeaderValue(it.Scope)
	if it.Scope != "" {
		h.Set(HeaderScope, scope)
	}
	if itemEnc || batchEnc || scopeEnc {
		h.Set(HeaderIDEncoding, IDEncodingPercent)
	}
	h.Set(HeaderKind, it.Kind)
	if it.Endpoint != "" {
		h.Set(HeaderEndpoint, it.Endpoint)
	}
	if it.Cost > 0 {
		h.Set(HeaderCost, strconv.FormatInt(it.Cost, 10))
	}
	id := MsgID(it.Batch, it.ID)
	if it.Replay != "" {
		h.Set(HeaderReplay, it.Replay)
		id += "/replay-" + it.Replay
	}
	if it.Fallback != "" {
		h.Set(HeaderFallback, it.Fallback)
		id += "/rt-" + it.Fallback
	}
	h.Set(jetstream.MsgIDHeader, id)
	return h
}

// Fits reports the size an item takes on the wire (payload and message
// headers) and whether it fits limit, a server's max payload. It needs no
// server: a dry run checks items against the default max payload with it.
func Fits(it kftype.Item, limit int64) (size int, ok bool) {
	size = len(it.Payload) + len("NATS/1.0\r\n\r\n")
	for k, vs := range header(it) {
		for _, v := range vs {
			size += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	return size, int64(size) <= limit
}

// DecodeStoredItem reads an item from a stored work message (one read
// from the stream rather than delivered), as DecodeItem does.
func DecodeStoredItem(m *jetstream.RawStreamMsg) (kftype.Item, error) {
	return DecodeItem(storedMsg{m: m})
}

// storedMsg is a stored message as DecodeItem reads a delivered one: its
// headers, subject and data alone (the embedded Msg, nil, is never
// called).
type storedMsg struct {
	jetstream.Msg
	m *jetstream.RawStreamMsg
}

func (s storedMsg) Headers() nats.Header { return s.m.Header }
func (s storedMsg) Subject() string      { return s.m.Subject }
func (s storedMsg) Data() []byte         { return s.m.Data }

// DecodeItem reads an item from a delivered work message.
func DecodeItem(msg jetstream.Msg) (kftype.Item, error) {
	h := msg.Headers()
	it := kftype.Item{
		ID:       h.Get(HeaderItem),
		Batch:    h.Get(HeaderBatch),
		Kind:     h.Get(HeaderKind),
		Payload:  msg.Data(),
		Replay:   h.Get(HeaderReplay),
		Scope:    h.Get(HeaderScope),
		Endpoint: h.Get(HeaderEndpoint),
		Fallback: h.Get(HeaderFallback),
	}
	if v := h.Get(HeaderCost); v != "" {
		if c, err := strconv.ParseInt(v, 10, 64); err == nil && c > 0 {
			it.Cost = c
		}
	}
	if it.Kind == "" {
		subj := msg.Subject()
		if it.Scope != "" { // the scope's token is the subject's last
			subj = subj[:max(strings.LastIndexByte(subj, '.'), 0)]
		}
		if i := strings.LastIndexByte(subj, '.'); i >= 0 {
			it.Kind = subj[i+1:]
		}
	}
	if enc := h.Get(HeaderIDEncoding); enc != "" {
		if err := decodeIDs(&it, enc); err != nil {
			return it, err
		}
	}
	switch {
	case it.ID == "":
		return it, fmt.Errorf("%w %s (subject %s)", errNoHeader, HeaderItem, msg.Subject())
	case it.Batch == "":
		return it, fmt.Errorf("%w %s (item %q)", errNoHeader, HeaderBatch, it.ID)
	}
	return it, nil
}

// decodeIDs decodes the item and batch IDs (and the scope) of a message
// that has the HeaderIDEncoding header enc (it is left as it came on an
// error).
func decodeIDs(it *kftype.Item, enc string) error {
	if enc != IDEncodingPercent {
		return fmt.Errorf("queue: unknown %s %q (item %q): written by a newer producer?", HeaderIDEncoding, enc, it.ID)
	}
	id, err := IDFromHeader(it.ID)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, HeaderItem)
	}
	batch, err := IDFromHeader(it.Batch)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, HeaderBatch)
	}
	scope, err := IDFromHeader(it.Scope)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, HeaderScope)
	}
	it.ID, it.Batch, it.Scope = id, batch, scope
	return nil
}
