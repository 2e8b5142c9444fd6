package enqueue_test

import (
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/enqueue"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// An enqueue with a deadline stages its items for the Batch API: they
// wait on the batch's staging subjects (one per kind, scope and
// endpoint), which no lane's consumer delivers, the batch's record takes
// the deadline and its provider, and what the batch holds counts them
// (a repeated enqueue past the duplicate window adds nothing).
func TestEnqueueWithDeadlineStages(t *testing.T) {
	q, _ := open(t)
	const chat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}]}`
	const embed = `{"model":"text-embedding-3-small","input":"abcdefgh"}`
	input := `{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":` + chat + `}
{"custom_id":"req-2","method":"POST","url":"/v1/embeddings","body":` + embed + `}
{"custom_id":"req-3","method":"POST","url":"/v1/chat/completions","body":` + chat + `}
`
	path := writeFile(t, "batchinput.jsonl", input)
	deadline := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	req := enqueue.Request{Source: enqueue.Source{Path: path}, Kind: "chat", NamedKinds: []string{"chat"},
		Batch: "later", Format: "openai-batch", Provider: "openai", Deadline: deadline}
	rep, err := enqueue.Run(ctx(t), q, req)
	if err != nil || rep.New != 3 {
		t.Fatalf("enqueue: %+v %v", rep, err)
	}
	subs, err := q.StagedSubjects(ctx(t), "later")
	if err != nil {
		t.Fatal(err)
	}
	chatSubj := q.StagingSubject("later", "chat", "gpt-4o-mini", "")
	embSubj := q.StagingSubject("later", "chat", "text-embedding-3-small", "/v1/embeddings")
	if len(subs) != 2 || subs[chatSubj] != 2 || subs[embSubj] != 1 {
		t.Fatalf("staged subjects: %v, want 2 on %s and 1 on %s", subs, chatSubj, embSubj)
	}
	kind, scope, endpoint, err := q.StagingParts("later", embSubj)
	if err != nil || kind != "chat" || scope != "text-embedding-3-small" || endpoint != "/v1/embeddings" {
		t.Errorf("StagingParts(%s) = %q %q %q %v", embSubj, kind, scope, endpoint, err)
	}
	m, err := q.NextStaged(ctx(t), chatSubj, 1)
	if err != nil || m == nil || m.Item.ID != "req-1" || string(m.Item.Payload) != chat || !m.Item.Staged {
		t.Fatalf("first staged message: %+v %v", m, err)
	}
	m2, err := q.NextStaged(ctx(t), chatSubj, m.Seq+1)
	if err != nil || m2 == nil || m2.Item.ID != "req-3" {
		t.Fatalf("second staged message: %+v %v", m2, err)
	}
	// No lane holds them.
	for _, lane := range []string{"later", kftype.Lane("later", "gpt-4o-mini"), kftype.Lane("later", "text-embedding-3-small")} {
		if n, err := q.LaneMessages(ctx(t), lane); err != nil || n != 0 {
			t.Errorf("lane %q holds %d messages (%v), want none", lane, n, err)
		}
	}
	rec, err := q.Batch(ctx(t), "later")
	if err != nil || !rec.Deadline.Equal(deadline) || rec.Provider != "openai" || rec.Total != 3 {
		t.Fatalf("record: %+v %v", rec, err)
	}
	held := map[string]bool{}
	if err := q.HeldItems(ctx(t), "later", func(id string) error { held[id] = true; return nil }); err != nil || len(held) != 3 {
		t.Errorf("held items: %v %v", held, err)
	}
	// A later deadline keeps the earlier one.
	req.Deadline = deadline.Add(time.Hour)
	if _, err := enqueue.Run(ctx(t), q, req); err != nil {
		t.Fatal(err)
	}
	if rec, _ = q.Batch(ctx(t), "later"); !rec.Deadline.Equal(deadline) {
		t.Errorf("deadline after a later one: %s, want %s", rec.Deadline, deadline)
	}
	// Purged through the first chat message: the second stays.
	if err := q.PurgeStaged(ctx(t), chatSubj, m.Seq); err != nil {
		t.Fatal(err)
	}
	if subs, _ = q.StagedSubjects(ctx(t), "later"); subs[chatSubj] != 1 {
		t.Errorf("after the purge: %v", subs)
	}
}
