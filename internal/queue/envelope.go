package queue

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Item is one work item on the wire.
type Item struct {
	ID, Batch, Kind string
	Payload         []byte // the item's JSON object
	// Replay marks an item put back from the dead-letter queue (its message
	// ID differs so that deduplication does not drop it).
	Replay string
}

// message builds the JetStream message for an item.
func (q *Queue) message(it Item) *nats.Msg {
	m := nats.NewMsg(q.itemSubject(it.Kind))
	m.Data = it.Payload
	m.Header.Set(HeaderItem, it.ID)
	m.Header.Set(HeaderBatch, it.Batch)
	m.Header.Set(HeaderKind, it.Kind)
	id := MsgID(it.Batch, it.ID)
	if it.Replay != "" {
		m.Header.Set(HeaderReplay, it.Replay)
		id += "/replay-" + it.Replay
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	return m
}

// DecodeItem reads an item from a delivered work message.
func DecodeItem(msg jetstream.Msg) (Item, error) {
	h := msg.Headers()
	it := Item{
		ID:      h.Get(HeaderItem),
		Batch:   h.Get(HeaderBatch),
		Kind:    h.Get(HeaderKind),
		Payload: msg.Data(),
		Replay:  h.Get(HeaderReplay),
	}
	if it.Kind == "" {
		if i := strings.LastIndexByte(msg.Subject(), '.'); i >= 0 {
			it.Kind = msg.Subject()[i+1:]
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
