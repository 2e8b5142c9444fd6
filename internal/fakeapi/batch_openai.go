package fakeapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"time"
)

// OpenAI's Files and Batch APIs (openai-openapi paths /files, /files/{id},
// /files/{id}/content, /batches, /batches/{id}, /batches/{id}/cancel).

// batchEndpoints are the endpoints a batch may name (openai-openapi
// CreateBatchRequest.endpoint enum); the stand-in runs the first two.
var batchEndpoints = []string{
	"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
	"/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos",
}

// filePurposes are the purposes an upload may give (openai-openapi
// CreateFileRequest.purpose enum).
var filePurposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

// supportedValues words an enum as OpenAI's invalid_value messages do:
// "'a', 'b', and 'c'".
func supportedValues(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = "'" + v + "'"
	}
	if len(q) == 1 {
		return q[0]
	}
	if len(q) == 2 {
		return q[0] + " and " + q[1]
	}
	return strings.Join(q[:len(q)-1], ", ") + ", and " + q[len(q)-1]
}

// invalidValue: "Invalid value: 'x'. Supported values are: 'a' and 'b'."
// with code invalid_value (the API's words, quoted in
// github.com/langchain-ai/langchain/pull/35702).
func invalidValue(v, param string, vals []string) *apiError {
	return invalid(fmt.Sprintf("Invalid value: '%s'. Supported values are: %s.", v, supportedValues(vals)), param, "invalid_value")
}

// fileObject is OpenAI's File object (openai-openapi OpenAIFile; the
// upload reply quoted in github.com/BerriAI/litellm/pull/37527 has
// status "processed", expires_at 30 days on and status_details null).
func fileObject(f *storedFile) any {
	return struct {
		ID            string `json:"id"`
		Object        string `json:"object"`
		Bytes         int    `json:"bytes"`
		CreatedAt     int64  `json:"created_at"`
		ExpiresAt     int64  `json:"expires_at"`
		Filename      string `json:"filename"`
		Purpose       string `json:"purpose"`
		Status        string `json:"status"`
		StatusDetails any    `json:"status_details"`
	}{f.id, "file", len(f.data), f.created.Unix(), f.created.Add(30 * 24 * time.Hour).Unix(), f.filename, f.purpose, "processed", nil}
}

// noSuchFile is the 404 for a file the key does not have ("No such File
// object", the API's answer per github.com/BerriAI/litellm/issues/37148).
func noSuchFile(id, param string) *apiError {
	e := &apiError{status: http.StatusNotFound, typ: "invalid_request_error", message: "No such File object: " + id}
	if param != "" {
		e.param = strp(param)
	}
	return e
}

// uploadFile answers POST /v1/files (multipart/form-data: file, purpose,
// optional expires_after[anchor] and expires_after[seconds]).
func (c *call) uploadFile() {
	ct := c.r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		c.fail(invalid(fmt.Sprintf("Invalid Content-Type header (%s), expected multipart/form-data. (HINT: If you're using curl, you can pass -H 'Content-Type: multipart/form-data')", ct), "", ""))
		return
	}
	var (
		purpose, filename string
		data              []byte
		hasFile, hasPurp  bool
	)
	mr := multipart.NewReader(bytes.NewReader(c.body), params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			c.fail(invalid("The multipart/form-data body could not be parsed.", "", ""))
			return
		}
		value, err := io.ReadAll(part)
		if err != nil {
			c.fail(invalid("The multipart/form-data body could not be parsed.", "", ""))
			return
		}
		switch name := part.FormName(); name {
		case "file":
			hasFile, data, filename = true, value, part.FileName()
		case "purpose":
			hasPurp, purpose = true, string(value)
		case "expires_after[anchor]", "expires_after[seconds]":
		default:
			c.fail(invalid("Unrecognized request argument supplied: "+name, "", ""))
			return
		}
	}
	switch {
	case !hasFile:
		c.fail(c.st.missing("file"))
		return
	case !hasPurp:
		c.fail(c.st.missing("purpose"))
		return
	case !slicesContains(filePurposes, purpose):
		c.fail(invalidValue(purpose, "purpose", filePurposes))
		return
	}
	if purpose == "batch" {
		if !strings.HasSuffix(filename, ".jsonl") {
			// 400 "Invalid file format for Batch API. Must be .jsonl", param and
			// code null: quoted from the API in github.com/BerriAI/litellm/pull/37527.
			c.fail(invalid("Invalid file format for Batch API. Must be .jsonl", "", ""))
			return
		}
		if int64(len(data)) > maxBatchFile {
			c.fail(invalid(fmt.Sprintf("File is too large for the Batch API: %d bytes, the maximum is %d bytes (200 MB).", len(data), maxBatchFile), "file", ""))
			return
		}
	}
	f := &storedFile{id: c.st.nextID("file-"), filename: filename, purpose: purpose, owner: c.k.index, created: time.Now(), data: data}
	c.st.store.mu.Lock()
	c.st.store.files[f.id] = f
	c.st.store.mu.Unlock()
	c.k.batch.filesCreated.Add(1)
	c.reply(fileObject(f))
}

// file returns the key's file of that ID. The caller holds the store's
// lock.
func (c *call) file(id string) *storedFile {
	f := c.st.store.files[id]
	if f == nil || f.owner != c.k.index {
		return nil
	}
	return f
}

// fileOr404 is the key's file id, or nil after answering that there is
// no such file.
func (c *call) fileOr404(id string) *storedFile {
	c.st.store.mu.Lock()
	f := c.file(id)
	c.st.store.mu.Unlock()
	if f == nil {
		c.fail(noSuchFile(id, "id"))
	}
	return f
}

func (c *call) getFile(id string) {
	f := c.fileOr404(id)
	if f == nil {
		return
	}
	c.k.batch.fileReads.Add(1)
	c.reply(fileObject(f))
}

// fileContent answers GET /v1/files/{id}/content with the file's bytes.
func (c *call) fileContent(id string) {
	f := c.fileOr404(id)
	if f == nil {
		return
	}
	c.k.batch.fileReads.Add(1)
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(f.data)
}

// deleteFile answers DELETE /v1/files/{id} (openai-openapi
// DeleteFileResponse: id, object "file", deleted).
func (c *call) deleteFile(id string) {
	c.st.store.mu.Lock()
	f := c.file(id)
	if f != nil {
		delete(c.st.store.files, id)
	}
	c.st.store.mu.Unlock()
	if f == nil {
		c.fail(noSuchFile(id, "id"))
		return
	}
	c.k.batch.filesDeleted.Add(1)
	c.reply(struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "file", true})
}

// listFiles answers GET /v1/files (purpose, limit, order, after): the
// key's files, newest first unless order=asc.
func (c *call) listFiles() {
	q := c.r.URL.Query()
	limit, ok := pageLimit(q.Get("limit"), 10000, 10000)
	if !ok {
		c.fail(invalid("Invalid 'limit': expected an integer between 1 and 10000.", "limit", "invalid_value"))
		return
	}
	c.st.store.mu.Lock()
	var files []*storedFile
	for _, f := range c.st.store.files {
		if f.owner == c.k.index && (q.Get("purpose") == "" || f.purpose == q.Get("purpose")) {
			files = append(files, f)
		}
	}
	c.st.store.mu.Unlock()
	asc := q.Get("order") == "asc"
	sortByID(files, func(f *storedFile) string { return f.id }, !asc)
	files = after(files, func(f *storedFile) string { return f.id }, q.Get("after"), !asc)
	more := len(files) > limit
	files = files[:min(limit, len(files))]
	data := make([]any, len(files))
	for i, f := range files {
		data[i] = fileObject(f)
	}
	c.k.batch.lists.Add(1)
	c.reply(listPage(data, firstLast(files, func(f *storedFile) string { return f.id }), more))
}

// createBatch answers POST /v1/batches (openai-openapi CreateBatchRequest:
// input_file_id, endpoint, completion_window required; metadata,
// output_expires_after). The reply is the new batch, status "validating";
// its input is checked at creation and the result shows at the next look.
func (c *call) createBatch() {
	st := c.st
	names, fields, err := objectFields(c.body)
	if err != nil {
		c.fail(st.badJSON())
		return
	}
	known := []string{"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}
	var unknown []string
	for _, n := range names {
		if !slicesContains(known, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 1 {
		c.fail(invalid("Unrecognized request argument supplied: "+unknown[0], "", ""))
		return
	} else if len(unknown) > 1 {
		c.fail(invalid("Unrecognized request arguments supplied: "+strings.Join(unknown, ", "), "", ""))
		return
	}
	str := map[string]string{}
	for _, n := range []string{"input_file_id", "endpoint", "completion_window"} {
		raw, ok := fields[n]
		if !ok {
			c.fail(st.missing(n))
			return
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			c.fail(st.wrongType(n, []jsonKind{kindString}, kindOf(raw)))
			return
		}
		str[n] = v
	}
	if str["completion_window"] != "24h" {
		c.fail(invalidValue(str["completion_window"], "completion_window", []string{"24h"}))
		return
	}
	ep := str["endpoint"]
	if !slicesContains(batchEndpoints, ep) {
		c.fail(invalidValue(ep, "endpoint", batchEndpoints))
		return
	}
	if ep != string(endpointChat) && ep != string(endpointEmbeddings) {
		c.fail(invalid("fakeapi: this stand-in runs batches of /v1/chat/completions and /v1/embeddings only, not "+ep+".", "endpoint", ""))
		return
	}
	meta, e := checkMetadata(fields["metadata"])
	if e != nil {
		c.fail(e)
		return
	}
	st.store.mu.Lock()
	defer st.store.mu.Unlock()
	f := c.file(str["input_file_id"])
	if f == nil {
		c.fail(noSuchFile(str["input_file_id"], "input_file_id"))
		return
	}
	if f.purpose != "batch" {
		c.fail(invalid(fmt.Sprintf("The input file %s was uploaded with purpose '%s'; a batch's input file must have purpose 'batch'.", f.id, f.purpose), "input_file_id", ""))
		return
	}
	b := &providerBatch{
		id: st.nextID("batch_"), owner: c.k.index, created: time.Now(), status: "validating",
		endpoint: ep, inputFileID: f.id, completionWindow: "24h", metadata: meta,
		times: map[string]time.Time{}, fail: st.takeFail(),
	}
	b.lines, b.errors, b.model = parseBatchFile(st, f.data, ep)
	if b.fail && b.errors == nil {
		// As OpenAI fails a batch over the organization's enqueued-token limit.
		b.errors = []batchError{{Code: "token_limit_exceeded", Message: fmt.Sprintf(
			"Enqueued token limit reached for %s in organization org-test. Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed.", b.model)}}
	}
	st.store.batches[b.id] = b
	c.k.batch.created.Add(1)
	c.reply(st.batchObject(b))
}

// checkMetadata checks a metadata object: at most 16 pairs, keys of at
// most 64 characters, string values of at most 512 (openai-openapi
// components.schemas.Metadata).
func checkMetadata(raw json.RawMessage) (json.RawMessage, *apiError) {
	if raw == nil || kindOf(raw) == kindNull {
		return nil, nil
	}
	names, fields, err := objectFields(raw)
	if err != nil {
		return nil, invalid(fmt.Sprintf("Invalid type for 'metadata': expected an object, but got %s instead.", openaiKind(kindOf(raw))), "metadata", "invalid_type")
	}
	if len(names) > 16 {
		return nil, invalid(fmt.Sprintf("Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object with %d properties instead.", len(names)), "metadata", "object_above_max_properties")
	}
	for _, n := range names {
		if len(n) > 64 {
			return nil, invalid(fmt.Sprintf("Invalid 'metadata': key too long. Expected a key with maximum length 64, but got a key with length %d instead.", len(n)), "metadata", "string_above_max_length")
		}
		var v string
		if json.Unmarshal(fields[n], &v) != nil {
			return nil, invalid(fmt.Sprintf("Invalid type for 'metadata.%s': expected a string, but got %s instead.", n, openaiKind(kindOf(fields[n]))), "metadata."+n, "invalid_type")
		}
		if len(v) > 512 {
			return nil, invalid(fmt.Sprintf("Invalid 'metadata.%s': string too long. Expected a string with maximum length 512, but got a string with length %d instead.", n, len(v)), "metadata."+n, "string_above_max_length")
		}
	}
	return raw, nil
}

// parseBatchFile reads a batch input file (JSONL; each line
// {"custom_id", "method": "POST", "url", "body"}, openai-openapi
// BatchRequestInput at 498c71d) and validates it as OpenAI does before a
// batch runs: the errors.data codes invalid_json_line, duplicate_custom_id,
// url_mismatch, empty_file, too_many_tasks (github.com/stdapi-ai/stdapi.ai
// issues/240 lists them as OpenAI documents them). A line's body is
// checked when the line runs, as real time would check it.
func parseBatchFile(st *strictState, data []byte, ep string) ([]*batchLine, []batchError, string) {
	var (
		lines []*batchLine
		errs  []batchError
		model string
		seen  = map[string]bool{}
	)
	lineErr := func(n int, code, param, msg string) {
		e := batchError{Code: code, Message: msg, Line: &n}
		if param != "" {
			e.Param = strp(param)
		}
		errs = append(errs, e)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), int(maxBatchFile)+1)
	n := 0
	for sc.Scan() {
		n++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var in struct {
			CustomID *string         `json:"custom_id"`
			Method   *string         `json:"method"`
			URL      *string         `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		if kindOf(text) != kindObject || json.Unmarshal(text, &in) != nil {
			lineErr(n, "invalid_json_line", "", "This line is not parseable as valid JSON.")
			continue
		}
		switch {
		case in.CustomID == nil:
			lineErr(n, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
			continue
		case in.Method == nil:
			lineErr(n, "missing_required_parameter", "method", "Missing required parameter: 'method'.")
			continue
		case in.URL == nil:
			lineErr(n, "missing_required_parameter", "url", "Missing required parameter: 'url'.")
			continue
		case in.Body == nil:
			lineErr(n, "missing_required_parameter", "body", "Missing required parameter: 'body'.")
			continue
		case *in.Method != http.MethodPost:
			lineErr(n, "invalid_value", "method", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'POST'.", *in.Method))
			continue
		case *in.URL != ep:
			lineErr(n, "url_mismatch", "url", fmt.Sprintf("The URL provided for this request (%s) does not match the batch's endpoint (%s).", *in.URL, ep))
			continue
		case seen[*in.CustomID]:
			lineErr(n, "duplicate_custom_id", "custom_id", "The custom_id for this request is a duplicate of another request. The custom_id parameter must be unique for each request in a batch.")
			continue
		}
		seen[*in.CustomID] = true
		if model == "" {
			var m struct {
				Model string `json:"model"`
			}
			_ = json.Unmarshal(in.Body, &m)
			model = m.Model
		}
		lines = append(lines, &batchLine{customID: *in.CustomID, body: in.Body, lineID: st.nextID("batch_req_")})
	}
	switch {
	case n == 0 || (len(lines) == 0 && len(errs) == 0):
		errs = append(errs, batchError{Code: "empty_file", Message: "The batch input file is empty."})
	case len(lines) > maxOpenAIBatchLines:
		errs = append(errs, batchError{Code: "too_many_tasks", Message: fmt.Sprintf(
			"The batch input file has %d requests; a batch can have at most %d.", len(lines), maxOpenAIBatchLines)})
	}
	if len(errs) > 0 {
		return nil, errs, model
	}
	return lines, nil, model
}

// advanceOpenAI moves a batch along OpenAI's statuses (openai-openapi
// Batch.status): validating → failed, or → in_progress → (its last
// request done) finalizing → (the next look) completed; cancelling →
// (the first look Config.CancelDelay after the cancel) cancelled, its
// requests not done before the cancel left undone ("The batch will be in
// status cancelling for up to 10 minutes, before changing to cancelled",
// openai-openapi POST /batches/{id}/cancel). The caller holds the
// store's lock.
func (st *strictState) advanceOpenAI(b *providerBatch, now time.Time) {
	switch b.status {
	case "validating":
		if b.errors != nil {
			b.status, b.times["failed_at"] = "failed", now
			return
		}
		b.status, b.times["in_progress_at"] = "in_progress", now
		fallthrough
	case "in_progress":
		st.process(b, now)
		if b.done == len(b.lines) {
			b.status, b.times["finalizing_at"] = "finalizing", now
		}
	case "finalizing":
		st.endOpenAI(b, "completed", now)
	case "cancelling":
		if st.cancelEnds(b.times["cancelling_at"], now) {
			st.endOpenAI(b, "cancelled", now)
		}
	}
}

// endOpenAI ends a batch with status (completed, cancelled, expired) and
// writes its output and error files: a line per request done, an
// expired batch's other requests as error lines with code batch_expired
// (github.com/warmbly/warmbly/pull/333: "only the unfinished ones land in
// the error file as batch_expired"); a cancelled batch's undone requests
// appear in neither ("partial results (if any) available in the output
// file", openai-openapi POST /batches/{id}/cancel).
func (st *strictState) endOpenAI(b *providerBatch, status string, now time.Time) {
	if status == "expired" {
		b.finish("expired")
	}
	b.status, b.times[status+"_at"] = status, now
	var out, errs bytes.Buffer
	for _, l := range b.lines {
		if l.result == "" {
			continue // not run: cancelled
		}
		line := openaiOutputLine(l)
		if l.result == "succeeded" {
			out.Write(line)
			out.WriteByte('\n')
		} else {
			errs.Write(line)
			errs.WriteByte('\n')
		}
	}
	write := func(data []byte, kind string) string {
		if len(data) == 0 {
			return ""
		}
		f := &storedFile{id: st.nextID("file-"), filename: fmt.Sprintf("%s_%s.jsonl", b.id, kind), purpose: "batch_output", owner: b.owner, created: now, data: data}
		st.store.files[f.id] = f
		return f.id
	}
	b.outputFileID, b.errorFileID = write(out.Bytes(), "output"), write(errs.Bytes(), "error")
}

// openaiOutputLine is a line of a batch's output or error file
// (openai-openapi BatchRequestOutput at 498c71d: id, custom_id, response
// {status_code, request_id, body} or null, error {code, message} or null;
// a request the API refused has its status and error body in response and
// error null, as github.com/openai/openai-openapi/issues/302 shows).
func openaiOutputLine(l *batchLine) []byte {
	type response struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	}
	type lineError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	v := struct {
		ID       string     `json:"id"`
		CustomID string     `json:"custom_id"`
		Response *response  `json:"response"`
		Error    *lineError `json:"error"`
	}{ID: l.lineID, CustomID: l.customID}
	if l.result == "expired" {
		v.Error = &lineError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
	} else {
		v.Response = &response{StatusCode: l.status, RequestID: l.reqID, Body: l.reply}
	}
	return marshal(v)
}

// batchObject is OpenAI's Batch object (openai-openapi
// components.schemas.Batch and its x-oaiMeta example: every timestamp
// present, null until it happens).
func (st *strictState) batchObject(b *providerBatch) any {
	ts := func(name string) any {
		if t, ok := b.times[name]; ok {
			return t.Unix()
		}
		return nil
	}
	var expires any
	if t, ok := b.times["in_progress_at"]; ok {
		expires = t.Add(24 * time.Hour).Unix()
	}
	var errs any
	if b.errors != nil {
		errs = struct {
			Object string       `json:"object"`
			Data   []batchError `json:"data"`
		}{"list", b.errors}
	}
	counts := struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	}{}
	var in, out int64
	if b.status != "validating" && b.status != "failed" {
		counts.Total = len(b.lines)
	}
	for _, l := range b.lines {
		switch l.result {
		case "succeeded":
			counts.Completed++
			in, out = in+l.in, out+l.out
		case "errored":
			counts.Failed++
		}
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var model any
	if b.model != "" {
		model = b.model
	}
	return struct {
		ID               string          `json:"id"`
		Object           string          `json:"object"`
		Endpoint         string          `json:"endpoint"`
		Model            any             `json:"model"`
		Errors           any             `json:"errors"`
		InputFileID      string          `json:"input_file_id"`
		CompletionWindow string          `json:"completion_window"`
		Status           string          `json:"status"`
		OutputFileID     any             `json:"output_file_id"`
		ErrorFileID      any             `json:"error_file_id"`
		CreatedAt        int64           `json:"created_at"`
		InProgressAt     any             `json:"in_progress_at"`
		ExpiresAt        any             `json:"expires_at"`
		FinalizingAt     any             `json:"finalizing_at"`
		CompletedAt      any             `json:"completed_at"`
		FailedAt         any             `json:"failed_at"`
		ExpiredAt        any             `json:"expired_at"`
		CancellingAt     any             `json:"cancelling_at"`
		CancelledAt      any             `json:"cancelled_at"`
		RequestCounts    any             `json:"request_counts"`
		Usage            any             `json:"usage"`
		Metadata         json.RawMessage `json:"metadata"`
	}{
		ID: b.id, Object: "batch", Endpoint: b.endpoint, Model: model, Errors: errs, InputFileID: b.inputFileID,
		CompletionWindow: b.completionWindow, Status: b.status,
		OutputFileID: nullable(b.outputFileID), ErrorFileID: nullable(b.errorFileID),
		CreatedAt: b.created.Unix(), InProgressAt: ts("in_progress_at"), ExpiresAt: expires,
		FinalizingAt: ts("finalizing_at"), CompletedAt: ts("completed_at"), FailedAt: ts("failed_at"),
		ExpiredAt: ts("expired_at"), CancellingAt: ts("cancelling_at"), CancelledAt: ts("cancelled_at"),
		RequestCounts: counts,
		Usage:         batchUsage{InputTokens: in, OutputTokens: out, TotalTokens: in + out},
		Metadata:      nullJSON(b.metadata),
	}
}

// batchUsage is a Batch's usage (openai-openapi Batch.usage).
type batchUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

func nullJSON(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("null")
	}
	return raw
}

// batchNotFound is the 404 for a batch the key does not have (code
// batch_not_found, per github.com/BerriAI/litellm/issues/37148).
func batchNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: strp("batch_not_found"),
		message: fmt.Sprintf("No batch found with id '%s'.", id)}
}

func (c *call) getBatch(id string) {
	c.withBatch(id, batchNotFound, func(b *providerBatch) {
		c.k.batch.polls.Add(1)
		c.reply(c.st.batchObject(b))
	})
}

// cancelBatch answers POST /v1/batches/{id}/cancel: a batch validating,
// in progress or finalizing goes to "cancelling" (cancelled at a look
// Config.CancelDelay later, request_counts meanwhile counting what was
// done before the cancel); one cancelling or cancelled is answered as it
// is; one completed, failed or expired is refused.
func (c *call) cancelBatch(id string) {
	c.withBatch(id, batchNotFound, func(b *providerBatch) {
		switch b.status {
		case "validating", "in_progress", "finalizing":
			b.status, b.times["cancelling_at"] = "cancelling", time.Now()
		case "cancelling", "cancelled":
		default:
			c.fail(invalid(fmt.Sprintf("Cannot cancel a batch with status '%s'.", b.status), "", ""))
			return
		}
		c.k.batch.cancelled.Add(1)
		c.reply(c.st.batchObject(b))
	})
}

// listBatches answers GET /v1/batches (limit 1..100, default 20; after):
// the key's batches, newest first (openai-openapi ListBatchesResponse:
// object "list", data, first_id, last_id, has_more).
func (c *call) listBatches() {
	q := c.r.URL.Query()
	limit, ok := pageLimit(q.Get("limit"), 20, 100)
	if !ok {
		c.fail(invalid(fmt.Sprintf("Invalid 'limit': expected an integer between 1 and 100, but got '%s' instead.", q.Get("limit")), "limit", "invalid_value"))
		return
	}
	c.st.store.mu.Lock()
	defer c.st.store.mu.Unlock()
	list := after(c.ownedBatches(), func(b *providerBatch) string { return b.id }, q.Get("after"), true)
	more := len(list) > limit
	list = list[:min(limit, len(list))]
	data := make([]any, len(list))
	for i, b := range list {
		data[i] = c.st.batchObject(b)
	}
	c.k.batch.lists.Add(1)
	c.reply(listPage(data, firstLast(list, func(b *providerBatch) string { return b.id }), more))
}

// listPage is an OpenAI list: object "list", data, first_id, last_id
// (null when empty), has_more.
func listPage(data []any, ids [2]any, more bool) any {
	return struct {
		Object  string `json:"object"`
		Data    []any  `json:"data"`
		FirstID any    `json:"first_id"`
		LastID  any    `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}{"list", data, ids[0], ids[1], more}
}

func firstLast[T any](list []T, id func(T) string) [2]any {
	if len(list) == 0 {
		return [2]any{nil, nil}
	}
	return [2]any{id(list[0]), id(list[len(list)-1])}
}

func sortByID[T any](list []T, id func(T) string, desc bool) {
	slices.SortFunc(list, func(a, b T) int {
		if desc {
			return compareIDs(id(b), id(a))
		}
		return compareIDs(id(a), id(b))
	})
}

// after drops the list's items up to and including the cursor: in a list
// newest first (desc), the items created before the cursor remain.
func after[T any](list []T, id func(T) string, cursor string, desc bool) []T {
	if cursor == "" {
		return list
	}
	for i, v := range list {
		c := compareIDs(id(v), cursor)
		if (desc && c < 0) || (!desc && c > 0) {
			return list[i:]
		}
	}
	return nil
}
