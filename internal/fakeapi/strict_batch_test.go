package fakeapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/fakeapi"
)

// upload posts a file to /v1/files as the SDKs do (multipart/form-data).
func upload(t *testing.T, url, key, filename, purpose, content string) answer {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if purpose != "" {
		_ = mw.WriteField("purpose", purpose)
	}
	if filename != "" {
		fw, _ := mw.CreateFormFile("file", filename)
		_, _ = io.WriteString(fw, content)
	}
	_ = mw.Close()
	return send(t, "POST", url+"/v1/files", buf.String(), append(openaiAuth(key), "Content-Type", mw.FormDataContentType())...)
}

// field decodes one top-level field of a JSON answer.
func field[T any](t *testing.T, a answer, name string) T {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	var v T
	if err := json.Unmarshal(m[name], &v); err != nil {
		t.Fatalf("field %s of %s: %v", name, a.body, err)
	}
	return v
}

// chatLine is a batch input line of a chat completion.
func chatLine(id, content string, maxTokens int) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"max_tokens":%d}}`, id, content, maxTokens)
}

// newBatch uploads lines and creates a batch of them; it returns the
// batch's ID.
func newBatch(t *testing.T, url, key string, lines ...string) string {
	t.Helper()
	f := upload(t, url, key, "in.jsonl", "batch", strings.Join(lines, "\n")+"\n")
	if f.status != 200 {
		t.Fatalf("upload: %d %s", f.status, f.body)
	}
	b := send(t, "POST", url+"/v1/batches", fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, field[string](t, f, "id")), openaiAuth(key)...)
	if b.status != 200 || field[string](t, b, "status") != "validating" {
		t.Fatalf("create: %d %s", b.status, b.body)
	}
	return field[string](t, b, "id")
}

// pollUntil GETs the URL until the JSON field has the value (at most 20 s).
func pollUntil(t *testing.T, url, key string, auth func(string) []string, name, value string) answer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := send(t, "GET", url, "", auth(key)...)
		if a.status != 200 {
			t.Fatalf("GET %s: %d %s", url, a.status, a.body)
		}
		if field[string](t, a, name) == value {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %s is not %q after 20s: %s", url, name, value, a.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func content(t *testing.T, url, key, fileID string) []map[string]any {
	t.Helper()
	a := send(t, "GET", url+"/v1/files/"+fileID+"/content", "", openaiAuth(key)...)
	if a.status != 200 {
		t.Fatalf("content of %s: %d %s", fileID, a.status, a.body)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(a.body), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestOpenAIFiles(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	want(t, "json body", send(t, "POST", url+"/v1/files", `{"purpose":"batch"}`, append(openaiAuth(oaKey), "Content-Type", "application/json")...), 400,
		oaError("Invalid Content-Type header (application/json), expected multipart/form-data. (HINT: If you're using curl, you can pass -H 'Content-Type: multipart/form-data')", "invalid_request_error", "", ""))
	want(t, "no purpose", upload(t, url, oaKey, "a.jsonl", "", "x"), 400,
		oaError("Missing required parameter: 'purpose'.", "invalid_request_error", "purpose", "missing_required_parameter"))
	want(t, "no file", upload(t, url, oaKey, "", "batch", ""), 400,
		oaError("Missing required parameter: 'file'.", "invalid_request_error", "file", "missing_required_parameter"))
	want(t, "bad purpose", upload(t, url, oaKey, "a.jsonl", "batches", "x"), 400,
		oaError("Invalid value: 'batches'. Supported values are: 'assistants', 'batch', 'fine-tune', 'vision', 'user_data', and 'evals'.", "invalid_request_error", "purpose", "invalid_value"))
	want(t, "not jsonl", upload(t, url, oaKey, "notes.txt", "batch", "x"), 400,
		oaError("Invalid file format for Batch API. Must be .jsonl", "invalid_request_error", "", ""))

	f := upload(t, url, oaKey, "in.jsonl", "batch", "{}\n")
	id := field[string](t, f, "id")
	created := field[int64](t, f, "created_at")
	wantFile := fmt.Sprintf(`{"id":%q,"object":"file","bytes":3,"created_at":%d,"expires_at":%d,"filename":"in.jsonl","purpose":"batch","status":"processed","status_details":null}`, id, created, created+30*24*3600)
	want(t, "upload", f, 200, wantFile)
	want(t, "retrieve", send(t, "GET", url+"/v1/files/"+id, "", openaiAuth(oaKey)...), 200, wantFile)
	want(t, "content", send(t, "GET", url+"/v1/files/"+id+"/content", "", openaiAuth(oaKey)...), 200, "{}\n")
	want(t, "another key's", send(t, "GET", url+"/v1/files/"+id, "", openaiAuth(oaKey2)...), 404,
		oaError("No such File object: "+id, "invalid_request_error", "id", ""))
	f2 := upload(t, url, oaKey, "b.jsonl", "user_data", "x")
	list := send(t, "GET", url+"/v1/files?limit=1", "", openaiAuth(oaKey)...)
	if field[bool](t, list, "has_more") != true || field[string](t, list, "first_id") != field[string](t, f2, "id") {
		t.Errorf("list: %s", list.body)
	}
	if l := send(t, "GET", url+"/v1/files?purpose=batch", "", openaiAuth(oaKey)...); field[string](t, l, "last_id") != id || strings.Count(l.body, `"object":"file"`) != 1 {
		t.Errorf("list by purpose: %s", l.body)
	}
	want(t, "delete", send(t, "DELETE", url+"/v1/files/"+id, "", openaiAuth(oaKey)...), 200, fmt.Sprintf(`{"id":%q,"object":"file","deleted":true}`, id))
	want(t, "deleted", send(t, "GET", url+"/v1/files/"+id+"/content", "", openaiAuth(oaKey)...), 404,
		oaError("No such File object: "+id, "invalid_request_error", "id", ""))
	if b := api.Stats().Keys[0].Batch; b.FilesCreated != 2 || b.FilesDeleted != 1 || b.FileReads != 2 || b.Lists != 2 {
		t.Errorf("batch stats %+v", b)
	}
}

func TestOpenAIBatchCreateRefusals(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	in := field[string](t, upload(t, url, oaKey, "in.jsonl", "batch", chatLine("a", "x", 1)), "id")
	other := field[string](t, upload(t, url, oaKey, "data.jsonl", "user_data", "x"), "id")
	body := func(extra string) string {
		return fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"%s}`, in, extra)
	}
	meta := `,"metadata":{` + strings.TrimSuffix(strings.Repeat(`"k":"v",`, 1), ",")
	for i := range 16 {
		meta += fmt.Sprintf(`,"k%d":"v"`, i)
	}
	meta += `}`
	for _, tt := range []struct {
		body             string
		status           int
		msg, param, code string
	}{
		{body(`,"id":"x"`), 400, "Unrecognized request argument supplied: id", "", ""},
		{`{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, 400, "Missing required parameter: 'input_file_id'.", "input_file_id", "missing_required_parameter"},
		{fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"48h"}`, in), 400, "Invalid value: '48h'. Supported values are: '24h'.", "completion_window", "invalid_value"},
		{fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat","completion_window":"24h"}`, in), 400, "Invalid value: '/v1/chat'. Supported values are: '/v1/responses', '/v1/chat/completions', '/v1/embeddings', '/v1/completions', '/v1/moderations', '/v1/images/generations', '/v1/images/edits', and '/v1/videos'.", "endpoint", "invalid_value"},
		{`{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 404, "No such File object: file-nope", "input_file_id", ""},
		{fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, other), 400, fmt.Sprintf("The input file %s was uploaded with purpose 'user_data'; a batch's input file must have purpose 'batch'.", other), "input_file_id", ""},
		{body(meta), 400, "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with 17 properties instead.", "metadata", "object_above_max_properties"},
		{body(`,"metadata":{"k":"` + strings.Repeat("v", 513) + `"}`), 400, "Invalid 'metadata.k': string too long. Expected a string with maximum length 512, but got a string with length 513 instead.", "metadata.k", "string_above_max_length"},
	} {
		r := send(t, "POST", url+"/v1/batches", tt.body, openaiAuth(oaKey)...)
		want(t, tt.body[:min(60, len(tt.body))], r, tt.status, oaError(tt.msg, "invalid_request_error", tt.param, tt.code))
	}
	// Another key cannot use the file.
	r := send(t, "POST", url+"/v1/batches", body(""), openaiAuth(oaKey2)...)
	want(t, "another key's file", r, 404, oaError("No such File object: "+in, "invalid_request_error", "input_file_id", ""))
}

// TestOpenAIBatchLifecycle: validating → in_progress → finalizing →
// completed, output and error files, usage billed as Batch API usage.
func TestOpenAIBatchLifecycle(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, BatchDelay: time.Hour})
	id := newBatch(t, url, oaKey,
		chatLine("r1", "abcdefgh [fake:output_tokens=3]", 10), // 32 bytes: 8 tokens in, 3 out
		chatLine("r2", "x [fake:status=400]", 10),
		chatLine("r3", "y [fake:status=500]", 10),
		`{"custom_id":"r4","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"z"}],"cost":1}}`,
		chatLine("r5", "abcd", 2), // 1 token in, 2 out
	)
	b := send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "in_progress" || !strings.Contains(b.body, `"request_counts":{"total":5,"completed":0,"failed":0}`) ||
		field[*int64](t, b, "expires_at") == nil || field[*int64](t, b, "output_file_id") != nil {
		t.Fatalf("in progress: %s", b.body)
	}
	api.SetBatchDelay(0)
	b = send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "finalizing" || !strings.Contains(b.body, `"request_counts":{"total":5,"completed":2,"failed":3}`) {
		t.Fatalf("finalizing: %s", b.body)
	}
	b = send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "completed" || field[*int64](t, b, "completed_at") == nil ||
		!strings.Contains(b.body, `"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":14},"metadata":null}`) ||
		!strings.Contains(b.body, `"model":"gpt-4o-mini","errors":null`) {
		t.Fatalf("completed: %s", b.body)
	}
	out := content(t, url, oaKey, field[string](t, b, "output_file_id"))
	if len(out) != 2 || out[0]["custom_id"] != "r1" || out[1]["custom_id"] != "r5" || out[0]["error"] != nil {
		t.Fatalf("output %v", out)
	}
	resp := out[0]["response"].(map[string]any)
	usage := resp["body"].(map[string]any)["usage"].(map[string]any)
	if resp["status_code"] != 200.0 || !strings.HasPrefix(resp["request_id"].(string), "req_") || usage["prompt_tokens"] != 8.0 || usage["completion_tokens"] != 3.0 ||
		!strings.HasPrefix(out[0]["id"].(string), "batch_req_") {
		t.Errorf("line r1: %v", out[0])
	}
	errs := content(t, url, oaKey, field[string](t, b, "error_file_id"))
	var got []string
	for _, l := range errs {
		r := l["response"].(map[string]any)
		e := r["body"].(map[string]any)["error"].(map[string]any)
		got = append(got, fmt.Sprintf("%s %v %s", l["custom_id"], r["status_code"], e["message"]))
	}
	wantErrs := []string{
		"r2 400 This request was refused with status 400 (fakeapi status marker).",
		"r3 500 The server had an error while processing your request. Sorry about that!",
		"r4 400 Unrecognized request argument supplied: cost",
	}
	if strings.Join(got, "\n") != strings.Join(wantErrs, "\n") {
		t.Errorf("error lines:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantErrs, "\n"))
	}
	k := api.Stats().Keys[0]
	if k.Usage.Batch != (fakeapi.Usage{Requests: 2, InputTokens: 9, OutputTokens: 5}) || k.Usage.RealTime != (fakeapi.Usage{}) ||
		k.ModelUsage["gpt-4o-mini"].Batch.Requests != 2 || k.Requests != 0 {
		t.Errorf("usage %+v %+v", k.Usage, k.ModelUsage)
	}
	if k.Batch.Created != 1 || k.Batch.Polls != 3 || k.Batch.FilesCreated != 1 || k.Batch.FileReads != 2 {
		t.Errorf("batch stats %+v", k.Batch)
	}
	// Another key does not see it; a completed batch cannot be cancelled.
	want(t, "another key", send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey2)...), 404,
		oaError(fmt.Sprintf("No batch found with id '%s'.", id), "invalid_request_error", "", "batch_not_found"))
	want(t, "cancel completed", send(t, "POST", url+"/v1/batches/"+id+"/cancel", "", openaiAuth(oaKey)...), 400,
		oaError("Cannot cancel a batch with status 'completed'.", "invalid_request_error", "", ""))
}

func TestOpenAIBatchPolledToCompletion(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI, BatchDelay: 200 * time.Millisecond})
	id := newBatch(t, url, oaKey, chatLine("a", "one", 5), chatLine("b", "two", 5))
	b := pollUntil(t, url+"/v1/batches/"+id, oaKey, openaiAuth, "status", "completed")
	if !strings.Contains(b.body, `"request_counts":{"total":2,"completed":2,"failed":0}`) || field[*string](t, b, "error_file_id") != nil {
		t.Errorf("completed: %s", b.body)
	}
}

// TestOpenAIBatchExpireAndCancel: expired batches keep what was done and
// list the rest as batch_expired; a cancelled batch keeps what was done.
func TestOpenAIBatchExpireAndCancel(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	expiring := newBatch(t, url, oaKey, chatLine("done", "a", 3), chatLine("held", "b [fake:hold]", 3))
	b := send(t, "GET", url+"/v1/batches/"+expiring, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "in_progress" || !strings.Contains(b.body, `"completed":1,"failed":0`) {
		t.Fatalf("held: %s", b.body)
	}
	cancelled := newBatch(t, url, oaKey, chatLine("c1", "a", 3), chatLine("c2", "b [fake:hold]", 3))
	c := send(t, "POST", url+"/v1/batches/"+cancelled+"/cancel", "", openaiAuth(oaKey)...)
	if field[string](t, c, "status") != "cancelling" || field[*int64](t, c, "cancelling_at") == nil {
		t.Fatalf("cancel: %s", c.body)
	}
	api.ExpireBatches()
	b = send(t, "GET", url+"/v1/batches/"+expiring, "", openaiAuth(oaKey)...)
	if field[string](t, b, "status") != "expired" || field[*int64](t, b, "expired_at") == nil || !strings.Contains(b.body, `"completed":1,"failed":0`) {
		t.Fatalf("expired: %s", b.body)
	}
	if out := content(t, url, oaKey, field[string](t, b, "output_file_id")); len(out) != 1 || out[0]["custom_id"] != "done" {
		t.Errorf("output %v", out)
	}
	errs := content(t, url, oaKey, field[string](t, b, "error_file_id"))
	if len(errs) != 1 || errs[0]["custom_id"] != "held" || errs[0]["response"] != nil ||
		fmt.Sprint(errs[0]["error"]) != "map[code:batch_expired message:This request could not be executed before the completion window expired.]" {
		t.Errorf("expired lines %v", errs)
	}
	// The cancelling batch was not expired: it ends cancelled.
	c = send(t, "GET", url+"/v1/batches/"+cancelled, "", openaiAuth(oaKey)...)
	if field[string](t, c, "status") != "cancelled" || field[*int64](t, c, "cancelled_at") == nil || field[*string](t, c, "error_file_id") != nil {
		t.Fatalf("cancelled: %s", c.body)
	}
	if out := content(t, url, oaKey, field[string](t, c, "output_file_id")); len(out) != 1 || out[0]["custom_id"] != "c1" {
		t.Errorf("cancelled output %v", out)
	}
	if again := send(t, "POST", url+"/v1/batches/"+cancelled+"/cancel", "", openaiAuth(oaKey)...); field[string](t, again, "status") != "cancelled" {
		t.Errorf("cancel again: %s", again.body)
	}
	if k := api.Stats().Keys[0].Batch; k.Cancelled != 2 || k.Created != 2 {
		t.Errorf("stats %+v", k)
	}
}

// TestOpenAIBatchValidation: a bad input file fails the batch with
// errors.data, as OpenAI validates it; FailNextBatches fails one.
func TestOpenAIBatchValidation(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	failed := func(name string, lines []string, wantErrs string) {
		t.Helper()
		id := newBatch(t, url, oaKey, lines...)
		b := send(t, "GET", url+"/v1/batches/"+id, "", openaiAuth(oaKey)...)
		if field[string](t, b, "status") != "failed" || field[*int64](t, b, "failed_at") == nil ||
			!strings.Contains(b.body, `"errors":{"object":"list","data":`+wantErrs+`}`) ||
			!strings.Contains(b.body, `"request_counts":{"total":0,"completed":0,"failed":0}`) {
			t.Errorf("%s: %s\nwant errors %s", name, b.body, wantErrs)
		}
	}
	failed("duplicate, url, json", []string{
		chatLine("a", "x", 1),
		chatLine("a", "y", 1),
		`{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{}}`,
		`not json`,
		`{"custom_id":"c","method":"GET","url":"/v1/chat/completions","body":{}}`,
		`{"custom_id":"d","url":"/v1/chat/completions","body":{}}`,
	}, `[{"code":"duplicate_custom_id","message":"The custom_id for this request is a duplicate of another request. The custom_id parameter must be unique for each request in a batch.","param":"custom_id","line":2},`+
		`{"code":"url_mismatch","message":"The URL provided for this request (/v1/embeddings) does not match the batch's endpoint (/v1/chat/completions).","param":"url","line":3},`+
		`{"code":"invalid_json_line","message":"This line is not parseable as valid JSON.","param":null,"line":4},`+
		`{"code":"invalid_value","message":"Invalid value: 'GET'. Supported values are: 'POST'.","param":"method","line":5},`+
		`{"code":"missing_required_parameter","message":"Missing required parameter: 'method'.","param":"method","line":6}]`)
	failed("empty", []string{""}, `[{"code":"empty_file","message":"The batch input file is empty.","param":null,"line":null}]`)
	api.FailNextBatches(1)
	failed("forced", []string{chatLine("a", "x", 1)}, `[{"code":"token_limit_exceeded","message":"Enqueued token limit reached for gpt-4o-mini in organization org-test. Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed.","param":null,"line":null}]`)
	// The next one runs.
	id := newBatch(t, url, oaKey, chatLine("a", "x", 1))
	pollUntil(t, url+"/v1/batches/"+id, oaKey, openaiAuth, "status", "completed")
}

func TestOpenAIBatchList(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderOpenAI})
	var ids []string
	for i := range 5 {
		ids = append(ids, newBatch(t, url, oaKey, chatLine("a", fmt.Sprint(i), 1)))
	}
	newBatch(t, url, oaKey2, chatLine("a", "other key", 1))
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page := send(t, "GET", url+"/v1/batches?limit=2"+cursor, "", openaiAuth(oaKey)...)
		var p struct {
			Object  string `json:"object"`
			Data    []struct{ ID string }
			FirstID string `json:"first_id"`
			LastID  string `json:"last_id"`
			HasMore bool   `json:"has_more"`
		}
		if err := json.Unmarshal([]byte(page.body), &p); err != nil || p.Object != "list" || len(p.Data) == 0 || p.FirstID != p.Data[0].ID || p.LastID != p.Data[len(p.Data)-1].ID {
			t.Fatalf("page %s (%v)", page.body, err)
		}
		for _, d := range p.Data {
			got = append(got, d.ID)
		}
		if !p.HasMore {
			break
		}
		if pages > 5 {
			t.Fatal("too many pages")
		}
		cursor = "&after=" + p.LastID
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}) {
		t.Errorf("listed %v, want %v newest first", got, ids)
	}
	if r := send(t, "GET", url+"/v1/batches?limit=101", "", openaiAuth(oaKey)...); r.status != 400 {
		t.Errorf("limit 101: %d %s", r.status, r.body)
	}
	if r := send(t, "GET", url+"/v1/batches?after="+ids[0], "", openaiAuth(oaKey)...); r.body != `{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}` {
		t.Errorf("after the oldest: %s", r.body)
	}
}

// ---- Anthropic ----

func mbRequest(id, content string, maxTokens int) string {
	return fmt.Sprintf(`{"custom_id":%q,"params":{"model":"claude-sonnet-4-6","max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`, id, maxTokens, content)
}

func newMessageBatch(t *testing.T, url, key string, reqs ...string) answer {
	t.Helper()
	a := send(t, "POST", url+"/v1/messages/batches", `{"requests":[`+strings.Join(reqs, ",")+`]}`, anthropicAuth(key)...)
	if a.status != 200 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	return a
}

func TestAnthropicBatchCreateRefusals(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	ok := mbRequest("a", "x", 1)
	for _, tt := range []struct{ body, msg string }{
		{`{"requests":[` + ok + `],"id":"x"}`, "id: Extra inputs are not permitted"},
		{`{}`, "requests: Field required"},
		{`{"requests":{}}`, "requests: Input should be a valid list"},
		{`{"requests":[]}`, "requests: List should have at least 1 item after validation, not 0"},
		{`{"requests":[` + mbRequest(strings.Repeat("a", 65), "x", 1) + `]}`, "requests.0.custom_id: String should have at most 64 characters"},
		{`{"requests":[` + ok + `,` + mbRequest("b c", "x", 1) + `]}`, "requests.1.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"},
		{`{"requests":[` + mbRequest("", "x", 1) + `]}`, "requests.0.custom_id: String should have at least 1 character"},
		{`{"requests":[` + ok + `,` + ok + `]}`, `requests.1.custom_id: custom_id "a" is already used by requests.0; each request's custom_id must be unique within the batch`},
		{`{"requests":[{"custom_id":"a"}]}`, "requests.0.params: Field required"},
		{`{"requests":[{"params":{}}]}`, "requests.0.custom_id: Field required"},
		{`{"requests":[{"custom_id":"a","params":[]}]}`, "requests.0.params: Input should be a valid dictionary"},
		{`{"requests":[{"custom_id":"a","params":{},"method":"POST"}]}`, "requests.0.method: Extra inputs are not permitted"},
	} {
		r := send(t, "POST", url+"/v1/messages/batches", tt.body, anthropicAuth(anKey)...)
		want(t, tt.body[:min(50, len(tt.body))], r, 400, anError(r, "invalid_request_error", tt.msg))
	}
}

// TestAnthropicBatchLifecycle: in_progress (every request counted as
// processing) → ended; results as JSON Lines; usage billed as Batch API
// usage.
func TestAnthropicBatchLifecycle(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic, BatchDelay: time.Hour})
	c := newMessageBatch(t, url, anKey,
		mbRequest("ok", "abcdefgh [fake:output_tokens=4]", 10), // 31 bytes: 8 in
		mbRequest("boom", "x [fake:status=500]", 10),
		mbRequest("bad", "x [fake:status=400]", 10),
		`{"custom_id":"zero","params":{"model":"claude-sonnet-4-6","max_tokens":0,"messages":[{"role":"user","content":"x"}]}}`,
	)
	id := field[string](t, c, "id")
	created := field[string](t, c, "created_at")
	ct, _ := time.Parse(time.RFC3339Nano, created)
	want(t, "created", c, 200, fmt.Sprintf(`{"id":%q,"type":"message_batch","processing_status":"in_progress","request_counts":{"processing":4,"succeeded":0,"errored":0,"canceled":0,"expired":0},"ended_at":null,"created_at":%q,"expires_at":%q,"archived_at":null,"cancel_initiated_at":null,"results_url":null}`,
		id, created, ct.Add(24*time.Hour).UTC().Format(time.RFC3339Nano)))
	r := send(t, "GET", url+"/v1/messages/batches/"+id+"/results", "", anthropicAuth(anKey)...)
	want(t, "results before the end", r, 404, anError(r, "not_found_error", fmt.Sprintf("Message batch %s not found.", id)))
	api.SetBatchDelay(0)
	b := send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...)
	if field[string](t, b, "processing_status") != "ended" || !strings.Contains(b.body, `"request_counts":{"processing":0,"succeeded":1,"errored":3,"canceled":0,"expired":0}`) ||
		field[string](t, b, "results_url") != url+"/v1/messages/batches/"+id+"/results" {
		t.Fatalf("ended: %s", b.body)
	}
	res := send(t, "GET", field[string](t, b, "results_url"), "", anthropicAuth(anKey)...)
	lines := strings.Split(strings.TrimSpace(res.body), "\n")
	if res.status != 200 || len(lines) != 4 {
		t.Fatalf("results %d %s", res.status, res.body)
	}
	var ok struct {
		CustomID string `json:"custom_id"`
		Result   struct {
			Type    string `json:"type"`
			Message struct {
				Type  string
				Usage map[string]any
			} `json:"message"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &ok); err != nil || ok.CustomID != "ok" || ok.Result.Type != "succeeded" || ok.Result.Message.Type != "message" ||
		ok.Result.Message.Usage["input_tokens"] != 8.0 || ok.Result.Message.Usage["output_tokens"] != 4.0 || ok.Result.Message.Usage["service_tier"] != "batch" {
		t.Errorf("succeeded line %s (%v)", lines[0], err)
	}
	for i, wantErr := range []string{
		`{"custom_id":"boom","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_`,
		`{"custom_id":"bad","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"This request was refused with status 400 (fakeapi status marker)."},"request_id":"req_`,
		`{"custom_id":"zero","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Input should be greater than or equal to 1"},"request_id":"req_`,
	} {
		if !strings.HasPrefix(lines[i+1], wantErr) {
			t.Errorf("line %d: %s\nwant prefix %s", i+1, lines[i+1], wantErr)
		}
	}
	k := api.Stats().Keys[0]
	if k.Usage.Batch != (fakeapi.Usage{Requests: 1, InputTokens: 8, OutputTokens: 4}) || k.ModelUsage["claude-sonnet-4-6"].Batch.OutputTokens != 4 {
		t.Errorf("usage %+v", k.Usage)
	}
	if k.Batch.Created != 1 || k.Batch.Polls != 1 || k.Batch.Results != 1 {
		t.Errorf("batch stats %+v", k.Batch)
	}
	r = send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey2)...)
	want(t, "another key", r, 404, anError(r, "not_found_error", fmt.Sprintf("Message batch %s not found.", id)))
	r = send(t, "POST", url+"/v1/messages/batches/"+id+"/cancel", "", anthropicAuth(anKey)...)
	want(t, "cancel ended", r, 400, anError(r, "invalid_request_error", fmt.Sprintf("Message batch %s has already ended and cannot be canceled.", id)))
	want(t, "delete", send(t, "DELETE", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...), 200, fmt.Sprintf(`{"id":%q,"type":"message_batch_deleted"}`, id))
	r = send(t, "GET", url+"/v1/messages/batches/"+id, "", anthropicAuth(anKey)...)
	want(t, "deleted", r, 404, anError(r, "not_found_error", fmt.Sprintf("Message batch %s not found.", id)))
}

func TestAnthropicBatchExpireCancelFail(t *testing.T) {
	t.Parallel()
	api, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	exp := field[string](t, newMessageBatch(t, url, anKey, mbRequest("done", "a", 2), mbRequest("held", "b [fake:hold]", 2)), "id")
	b := send(t, "GET", url+"/v1/messages/batches/"+exp, "", anthropicAuth(anKey)...)
	if field[string](t, b, "processing_status") != "in_progress" || !strings.Contains(b.body, `"processing":2`) {
		t.Fatalf("held: %s", b.body)
	}
	r := send(t, "DELETE", url+"/v1/messages/batches/"+exp, "", anthropicAuth(anKey)...)
	want(t, "delete in progress", r, 400, anError(r, "invalid_request_error", fmt.Sprintf("Message batch %s is still in progress; cancel it and wait for it to end before deleting it.", exp)))
	can := field[string](t, newMessageBatch(t, url, anKey, mbRequest("c1", "a", 2), mbRequest("c2", "b [fake:hold]", 2)), "id")
	c := send(t, "POST", url+"/v1/messages/batches/"+can+"/cancel", "", anthropicAuth(anKey)...)
	if field[string](t, c, "processing_status") != "canceling" || field[*string](t, c, "cancel_initiated_at") == nil {
		t.Fatalf("canceling: %s", c.body)
	}
	api.ExpireBatches()
	b = send(t, "GET", url+"/v1/messages/batches/"+exp, "", anthropicAuth(anKey)...)
	if field[string](t, b, "processing_status") != "ended" || !strings.Contains(b.body, `"request_counts":{"processing":0,"succeeded":1,"errored":0,"canceled":0,"expired":1}`) {
		t.Fatalf("expired: %s", b.body)
	}
	res := send(t, "GET", url+"/v1/messages/batches/"+exp+"/results", "", anthropicAuth(anKey)...)
	if lines := strings.Split(strings.TrimSpace(res.body), "\n"); len(lines) != 2 || lines[1] != `{"custom_id":"held","result":{"type":"expired"}}` ||
		!strings.HasPrefix(lines[0], `{"custom_id":"done","result":{"type":"succeeded","message":{"id":"msg_`) {
		t.Errorf("expired results %s", res.body)
	}
	// The canceling batch ended canceled, not expired, at the next look.
	c = send(t, "GET", url+"/v1/messages/batches/"+can, "", anthropicAuth(anKey)...)
	if field[string](t, c, "processing_status") != "ended" || !strings.Contains(c.body, `"succeeded":1,"errored":0,"canceled":1,"expired":0`) {
		t.Errorf("canceled: %s", c.body)
	}
	api.FailNextBatches(1)
	f := field[string](t, newMessageBatch(t, url, anKey, mbRequest("f1", "a", 2), mbRequest("f2", "b", 2)), "id")
	b = send(t, "GET", url+"/v1/messages/batches/"+f, "", anthropicAuth(anKey)...)
	if !strings.Contains(b.body, `"succeeded":0,"errored":2`) {
		t.Errorf("failed batch: %s", b.body)
	}
	if k := api.Stats().Keys[0].Batch; k.Created != 3 || k.Cancelled != 1 || k.Results != 1 {
		t.Errorf("stats %+v", k)
	}
}

func TestAnthropicBatchList(t *testing.T) {
	t.Parallel()
	_, url := strictServer(t, fakeapi.Config{Provider: fakeapi.ProviderAnthropic})
	var ids []string
	for i := range 5 {
		ids = append(ids, field[string](t, newMessageBatch(t, url, anKey, mbRequest("a", fmt.Sprint(i), 1)), "id"))
	}
	newMessageBatch(t, url, anKey2, mbRequest("a", "other key", 1))
	type page struct {
		Data    []struct{ ID string }
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}
	get := func(q string) (page, []string) {
		a := send(t, "GET", url+"/v1/messages/batches"+q, "", anthropicAuth(anKey)...)
		var p page
		if err := json.Unmarshal([]byte(a.body), &p); err != nil {
			t.Fatalf("%s: %s", q, a.body)
		}
		var got []string
		for _, d := range p.Data {
			got = append(got, d.ID)
		}
		return p, got
	}
	p, got := get("?limit=2")
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[4], ids[3]}) || !p.HasMore || *p.FirstID != ids[4] || *p.LastID != ids[3] {
		t.Errorf("first page %v %+v", got, p)
	}
	p, got = get("?limit=2&after_id=" + ids[3])
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[2], ids[1]}) || !p.HasMore {
		t.Errorf("after_id page %v", got)
	}
	p, got = get("?limit=2&after_id=" + ids[1])
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[0]}) || p.HasMore {
		t.Errorf("last page %v %+v", got, p)
	}
	p, got = get("?limit=2&before_id=" + ids[1])
	if fmt.Sprint(got) != fmt.Sprint([]string{ids[3], ids[2]}) || !p.HasMore {
		t.Errorf("before_id page %v %+v", got, p)
	}
	p, got = get("?before_id=" + ids[4])
	if len(got) != 0 || p.HasMore || p.FirstID != nil {
		t.Errorf("before the newest %v %+v", got, p)
	}
	if r := send(t, "GET", url+"/v1/messages/batches?limit=1001", "", anthropicAuth(anKey)...); r.status != http.StatusBadRequest {
		t.Errorf("limit 1001: %d", r.status)
	}
}
