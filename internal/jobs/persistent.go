// Persistent exec handlers (exec: {persistent: true}): the contract with
// the command (docs/handlers.md, "Persistent handlers").
//
// The command is started once per worker slot, at the slot's first item,
// and kept: a worker of concurrency N runs at most N of them, and an idle
// one serves the next item of any slot. Per item it gets one line on its
// stdin, a JSON object:
//
//	{"id": "...", "batch": "...", "attempt": 1, "credential_id": "key-a",
//	 "secret": "sk-...", "item": {<the item's JSON object, as enqueued>}}
//
// and answers with one line on its stdout, a JSON object:
//
//	{"id": "<the item line's id>",
//	 "status": "ok"|"rate_limited"|"rejected"|"permanent"|"transient",
//	 "output": <any JSON>, "error": "...", "retry_after": <seconds>,
//	 "cost": <number>, "headers": {<name>: <value>}}
//
// id and status are required. An answer is taken for the item whose id it
// echoes and no other. Any other line read while an item waits is skipped
// and noted, and the item's own answer is read on, within the timeout:
// an answer for another item (a late one, a second answer to an earlier
// item) and a line the handler wrote unasked (a banner a library prints at
// start, debug output, a blank line, JSON without the item's id). So a
// handler that prints a line at start costs no item, one that answers an
// item twice or late never puts its process one answer behind, and what it
// says about one item (its output, its key's refusal) never lands on
// another. At most MaxSkippedLines such lines are skipped per item. The
// statuses mean what exec's exit statuses do:
//
//	ok            done (exit 0); output, as its JSON text, is the item's
//	              output. A retry_after with ok still makes the credential
//	              rest that long: the API said the key is spent for now.
//	rate_limited  (exit 75) the credential rests for retry_after seconds
//	              (a number, or a Retry-After header's text: "30", an
//	              HTTP-date), else for what headers say; without either the
//	              key is paced as after a bare 429. The item runs again at
//	              once and no attempt is used up.
//	rejected      (exit 77) the API refused the key (error, up to 200
//	              bytes, is the reason); the item runs again with another
//	              one, and a key that refuses several items in a row is
//	              disabled.
//	permanent     (exit 65) the item is not retried; it is dead-lettered
//	              with error.
//	transient     (any other exit) the item is retried after a backoff and
//	              the run uses up an attempt.
//
// cost, whatever the status, is what the run really cost (tokens,
// credits): it replaces the item's estimate in the credential's cost
// limits, like exec's "Cost:" line. headers are the rate-limit headers of
// the API reply the handler got (x-ratelimit-*, anthropic-ratelimit-*,
// retry-after, retry-after-ms; values as strings or numbers): with ok or
// rate_limited they pace the key exactly as the http kind's reply headers
// do (ParseRateHeaders). Fields not listed are ignored.
//
// Failures of the handler itself fail the item as transient, and the
// process is killed (its whole process group) and started afresh for the
// next item:
//
//   - it exits (or its stdout closes);
//   - it writes a line with the waiting item's id that is not an answer
//     (a missing or unknown status);
//   - it does not answer within the configured timeout (lines skipped
//     never extend it);
//   - a line it writes is longer than jobs.max_output;
//   - it writes more than MaxSkippedLines lines that are not the waiting
//     item's answer.
//
// Each such cause is logged by the worker the first time, then at most
// once a minute with the count of those held back; so is every start of a
// handler process, and so is each kind of skipped line (NoteStray,
// NoteSkipped: the line quoted, scrubbed, cut at 200 bytes).
//
// What the process gets:
//
//   - environment: the worker's minus every secret_env variable and every
//     inherited KEYFLEET_* variable (they may hold a config path or a
//     server URL with its password), plus the configured env, plus
//     KEYFLEET_KIND=exec. The secret travels only in the item line. A
//     handler's own settings go in variables of other names (the
//     examples read OPENAI_BASE_URL) or in exec.env.
//   - working directory: the configured dir, else the worker's.
//   - stderr: logged by the worker line by line, with every configured
//     secret scrubbed; lines are cut at 1 KiB and at most 20 a second are
//     logged (a burst of 100: a traceback gets through), the rest counted.
//
// A persistent handler never outlives its worker: it runs in a process
// group of its own, with SIGKILL as its parent-death signal, under the
// worker's job guard (see internal/jobguard). When the worker stops, each
// idle handler's stdin is closed (a handler that reads to the end exits by
// itself) and whatever still runs a second later is killed; a run that
// is cancelled (worker shutdown, lost lease) kills its handler too, since
// its answer would come too late.

package jobs

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/keyfleet/keyfleet/internal/secret"
)

// HandlerNote is what a persistent handler has for the worker's log: a
// line of a handler process's stderr, a failure of one, or its start. Its
// Text is scrubbed of every configured secret.
type HandlerNote struct {
	// Cause is NoteStderr, NoteStarted, a line skipped while an item
	// waited (NoteStray, NoteSkipped), or why a handler process failed:
	// NoteStart, NoteExit, NoteAnswer, NoteTimeout, NoteOversize.
	Cause string
	// PID is the handler process's (0 when it could not start).
	PID int
	// Text is the stderr line or what happened, one line.
	Text string
	// Dropped counts the notes of this cause held back since the last one
	// reported (see the rate limits in the contract).
	Dropped int
}

// The causes of a HandlerNote.
const (
	NoteStderr   = "stderr"   // a line of a handler's stderr
	NoteStarted  = "started"  // a handler process started
	NoteStart    = "start"    // a handler process could not start
	NoteExit     = "exit"     // a handler exited, or closed its stdout
	NoteAnswer   = "answer"   // a handler's line for the waiting item was not an answer, or it wrote too many other lines
	NoteTimeout  = "timeout"  // a handler did not answer within the timeout
	NoteOversize = "oversize" // a handler's answer line was over jobs.max_output
	NoteStray    = "stray"    // a handler answered for another item than the one waiting: skipped
	NoteSkipped  = "skipped"  // a handler wrote a line that is not an answer (a banner, debug output): skipped
)

// Bounds of a persistent handler's notes.
const (
	noteEvery        = time.Minute // a failure cause is noted at most this often
	stderrLinesBurst = 100         // stderr lines logged at once
	stderrLinesRate  = 20          // stderr lines logged a second, after the burst
	handlerCloseWait = time.Second // for an idle handler to exit on EOF at Close
	handlerExitWait  = time.Second // for an exited handler's status and stderr
)

// errHandlerClosed is the error of a run after Close.
var errHandlerClosed = errors.New("exec: the persistent handler is closed: the worker is stopping")

// errLineTooLong is readLine's error for a line over its bound.
var errLineTooLong = errors.New("line too long")

// persistentHandler is the exec kind with persistent: true. It keeps a
// pool of handler processes: a run takes an idle one or starts one, and
// gives it back if it answered; a broken one is killed and dropped.
type persistentHandler struct {
	*execHandler
	notes *noter

	mu     sync.Mutex
	idle   []*handlerProc // LIFO: the warmest first
	live   map[*handlerProc]struct{}
	closed bool
}

func newPersistent(h *execHandler) *persistentHandler {
	return &persistentHandler{execHandler: h, notes: newNoter(h.cfg.Notes), live: map[*handlerProc]struct{}{}}
}

// handlerProc is one handler process.
type handlerProc struct {
	cmd *exec.Cmd
	pid int
	in  *os.File // our end of its stdin
	out *os.File // our end of its stdout
	r   *bufio.Reader

	exited  chan struct{} // closed once it has exited and been reaped
	waitErr error         // set before exited is closed

	stderrDone chan struct{} // closed once its stderr reached its end

	// wroteNothing: the last item line's write failed before any byte
	// went into its stdin (it had no reader any more).
	wroteNothing bool
	tailMu       sync.Mutex
	tail         tailBuffer // the end of its stderr since the current item was sent, scrubbed (nil scrubber: empty)
}

// Run sends the item to a handler process and reads its answer; see the
// contract at the top of persistent.go.
func (h *persistentHandler) Run(ctx context.Context, item Item, cred Credential) (Output, error) {
	if ctx.Err() != nil {
		return Output{}, canceledError("exec", ctx)
	}
	line, err := itemLine(item, cred)
	if err != nil {
		return Output{}, err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, h.cfg.Timeout, errExecTimeout)
	defer cancel()
	// A process that exits right after an answer may still look idle when
	// the next item takes it: if it never read that item's line, the item
	// goes to a new process at once and no attempt is spent (it did no
	// work); once per run.
	for retried := false; ; retried = true {
		p, err := h.take()
		if err != nil {
			return Output{}, err
		}
		out, err, unread := h.exchange(ctx, runCtx, p, item, line, cred)
		if !unread || retried {
			return out, err
		}
		h.notes.note(NoteExit, p.pid, fmt.Sprintf("handler %d exited before it read an item; the item went to a new one", p.pid))
	}
}

// exchange runs item on process p and maps its answer; unread reports
// that p failed without having read the item's line (the item may go to
// another process as if it had not run).
func (h *persistentHandler) exchange(ctx, runCtx context.Context, p *handlerProc, item Item, line []byte, cred Credential) (_ Output, _ error, unread bool) {
	sc := scrubberFor(h.cfg.Scrubber, cred)
	var ans answer
	var bad error // the line read is not an answer
	var badLine []byte
	skipped := 0
	err := p.exchange(runCtx, line, h.limit, func(raw []byte) bool {
		a, kind, why := readAnswer(raw, item.ID)
		switch kind {
		case lineAnswer:
			ans = a
			return true
		case lineBroken:
			bad, badLine = why, raw
			return true
		}
		// Not this item's answer: it is never taken for it.
		skipped++
		if skipped > MaxSkippedLines {
			bad, badLine = fmt.Errorf("more than %d lines that are not this item's answer", MaxSkippedLines), raw
			return true
		}
		waiting := headString([]byte(strconv.Quote(item.ID)), 80)
		if kind == lineStray {
			// A late or second answer to an item this process served
			// before.
			h.notes.note(NoteStray, p.pid, fmt.Sprintf("handler %d answered for item %s while item %s waited: that answer is skipped",
				p.pid, headString([]byte(strconv.Quote(a.id)), 80), waiting))
			return false
		}
		h.notes.note(NoteSkipped, p.pid, fmt.Sprintf("handler %d wrote %q while item %s waited, not an answer (%v): skipped; a handler's own output belongs on stderr",
			p.pid, headString(sc.Bytes(raw), 200), waiting, why))
		return false
	})
	if err != nil {
		never := runCtx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)) && p.neverRead(line)
		h.discard(p)
		if ctx.Err() != nil {
			return Output{}, canceledError("exec", ctx), false
		}
		if never {
			return Output{}, nil, true
		}
		return Output{}, h.failed(p, runCtx, err, cred), false
	}
	if bad != nil {
		h.discard(p)
		quoted := headString(sc.Bytes(badLine), 200)
		h.notes.note(NoteAnswer, p.pid, fmt.Sprintf("handler %d wrote %q: %v; killed, a new one serves the next item", p.pid, quoted, bad))
		return Output{}, fmt.Errorf("exec: the persistent handler (pid %d) wrote a line that is not an answer (%v): %q", p.pid, bad, quoted), false
	}
	h.put(p)
	out, err := ans.result(sc, time.Now())
	return out, err, false
}

// neverRead reports whether the process broke before reading any of line,
// the item line last written to it: its stdin was closed (the write
// failed for want of a reader) or still holds the whole line.
func (p *handlerProc) neverRead(line []byte) bool {
	select {
	case <-p.exited:
	case <-time.After(handlerExitWait):
		return false // it did not end: it may be working on the item
	}
	return unreadBytes(p.in) == len(line) || p.wroteNothing
}

// MaxSkippedLines bounds the lines a persistent handler process may write
// while one item waits that are not that item's answer (a banner, debug
// output, an answer for another item, a second answer): each is skipped
// and noted, and the item's own answer is read on. Past the bound the
// process is taken to be out of step for good (it logs on stdout, or
// answers items it was never sent): it is killed, and the item fails as
// transient. 16 leaves room for what a handler writes unasked in
// practice: a library's start banner or warnings (a few lines, once per
// process), a second or late answer (one per item); and it bounds what a
// process that writes its log on stdout costs each item: 16 lines read
// (each at most jobs.max_output) before it is replaced, instead of a wait
// until the timeout.
const MaxSkippedLines = 16

// failed reports a process that broke while serving an item: it notes
// the cause and returns the item's (transient) error.
func (h *persistentHandler) failed(p *handlerProc, runCtx context.Context, err error, cred Credential) error {
	var cause, what string
	switch {
	case errors.Is(context.Cause(runCtx), errExecTimeout):
		cause, what = NoteTimeout, fmt.Sprintf("did not answer within the timeout (%s)", h.cfg.Timeout)
	case errors.Is(err, errLineTooLong):
		cause, what = NoteOversize, fmt.Sprintf("wrote an answer line over jobs.max_output (%d bytes)", h.limit)
	default:
		// It exited, or closed its stdout, or a pipe failed: say how it
		// ended, with the end of its stderr (a traceback, say).
		cause = NoteExit
		status := "closed its stdout (" + err.Error() + ")"
		t := time.NewTimer(handlerExitWait)
		select {
		case <-p.exited:
			status = exitText(p.waitErr)
			select {
			case <-p.stderrDone:
			case <-t.C:
			}
		case <-t.C:
		}
		t.Stop()
		what = status
		p.tailMu.Lock()
		tail := p.tail.String()
		p.tailMu.Unlock()
		if tail != "" {
			what += "; stderr: " + tail
		}
	}
	what = scrubberFor(h.cfg.Scrubber, cred).String(what)
	h.notes.note(cause, p.pid, fmt.Sprintf("handler %d %s; killed, a new one serves the next item", p.pid, oneLine(what)))
	if cause == NoteTimeout {
		return fmt.Errorf("exec: timed out after %s (the persistent handler, pid %d, was killed)", h.cfg.Timeout, p.pid)
	}
	return fmt.Errorf("exec: the persistent handler (pid %d) %s", p.pid, what)
}

// exitText says how a process ended, from its Wait error.
func exitText(err error) string {
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		return "exited (exit status 0)"
	}
	return "exited (" + err.Error() + ")"
}

// oneLine joins the lines of s with " | ", for a log line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}

// take returns an idle process, or starts one.
func (h *persistentHandler) take() (*handlerProc, error) {
	h.mu.Lock()
	for !h.closed && len(h.idle) > 0 {
		p := h.idle[len(h.idle)-1]
		h.idle = h.idle[:len(h.idle)-1]
		select {
		case <-p.exited:
			// It exited while idle: no item was lost; note it and start
			// another.
			delete(h.live, p)
			h.mu.Unlock()
			p.closeFiles()
			h.notes.note(NoteExit, p.pid, fmt.Sprintf("handler %d %s while idle; a new one serves the next item", p.pid, exitText(p.waitErr)))
			h.mu.Lock()
		default:
			h.mu.Unlock()
			return p, nil
		}
	}
	if h.closed {
		h.mu.Unlock()
		return nil, errHandlerClosed
	}
	h.mu.Unlock()
	p, err := h.start()
	if err != nil {
		h.notes.note(NoteStart, 0, err.Error())
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		p.kill()
		p.closeFiles()
		return nil, errHandlerClosed
	}
	h.live[p] = struct{}{}
	return p, nil
}

// put gives a process that answered back to the pool.
func (h *persistentHandler) put(p *handlerProc) {
	h.mu.Lock()
	if !h.closed {
		h.idle = append(h.idle, p)
		h.mu.Unlock()
		return
	}
	delete(h.live, p)
	h.mu.Unlock()
	p.kill()
	p.closeFiles()
}

// discard kills a process that broke and drops it.
func (h *persistentHandler) discard(p *handlerProc) {
	h.mu.Lock()
	delete(h.live, p)
	h.mu.Unlock()
	p.kill()
	p.closeFiles()
}

// Close stops the handler processes: each idle one gets the end of its
// stdin and a second to exit, then whatever still runs is killed (a busy
// one at once). Runs after Close fail. It returns once every process has
// been reaped (or after a bound). Safe to call twice.
func (h *persistentHandler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	idle := h.idle
	h.idle = nil
	all := make([]*handlerProc, 0, len(h.live))
	for p := range h.live {
		all = append(all, p)
	}
	h.live = map[*handlerProc]struct{}{}
	h.mu.Unlock()

	isIdle := make(map[*handlerProc]bool, len(idle))
	for _, p := range idle {
		isIdle[p] = true
		_ = p.in.Close()
	}
	for _, p := range all {
		if !isIdle[p] {
			p.kill()
		}
	}
	deadline := time.NewTimer(handlerCloseWait)
	defer deadline.Stop()
	for _, p := range idle {
		select {
		case <-p.exited:
		case <-deadline.C:
		}
	}
	var stuck []int
	for _, p := range all {
		p.kill()
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			stuck = append(stuck, p.pid)
		}
		if isIdle[p] {
			p.closeFiles()
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("exec: persistent handler processes %v did not exit within 5s of SIGKILL", stuck)
	}
	return nil
}

// environ is the handler processes' environment: the worker's minus
// every secret_env and KEYFLEET_* variable, plus Env and KEYFLEET_KIND.
func (h *persistentHandler) environ() []string {
	return append(baseEnviron(h.drop, h.env, 1), envKind+"="+KindExec)
}

// start starts a handler process under the job guard.
func (h *persistentHandler) start() (*handlerProc, error) {
	var pp execPipes
	if err := pp.open(); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	cmd := exec.Command(h.cfg.Command[0], h.cfg.Command[1:]...)
	cmd.Dir = h.cfg.Dir
	cmd.Env = h.environ()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pp.inR, pp.outW, pp.errW
	if err := h.cfg.Guard.Start(cmd); err != nil {
		pp.close()
		return nil, fmt.Errorf("exec: start the persistent handler %s: %w", h.cfg.Command[0], err)
	}
	pp.closeChildEnds()
	p := &handlerProc{
		cmd: cmd, pid: cmd.Process.Pid, in: pp.inW, out: pp.outR,
		r:          bufio.NewReaderSize(pp.outR, 64<<10),
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
		tail:       tailBuffer{max: stderrTailMax},
	}
	go func() {
		// Once it has exited, Wait kills what it left in its group.
		p.waitErr = h.cfg.Guard.Wait(cmd)
		close(p.exited)
	}()
	go func() {
		defer close(p.stderrDone)
		defer pp.errR.Close()
		if h.cfg.Scrubber == nil {
			// Which secrets to scrub is unknown: nothing of it is kept.
			_, _ = io.Copy(io.Discard, pp.errR)
			return
		}
		lines := &stderrLines{p: p, notes: h.notes, sc: h.cfg.Scrubber}
		_, _ = io.Copy(lines, pp.errR)
		lines.flush() // a last line without a newline
	}()
	h.notes.note(NoteStarted, p.pid, fmt.Sprintf("handler %d started: %s", p.pid, strings.Join(h.cfg.Command, " ")))
	return p, nil
}

// exchange writes the item line, then reads lines and passes each to
// next until next reports it has what it wants; the writing and the
// reading are bounded by ctx: its end sets the pipes' deadlines, which
// ends a blocked write or read.
func (p *handlerProc) exchange(ctx context.Context, line []byte, limit int, next func([]byte) (done bool)) error {
	// The stderr quoted in a failure is what this item's run wrote.
	p.tailMu.Lock()
	p.tail = tailBuffer{buf: p.tail.buf[:0], max: stderrTailMax}
	p.tailMu.Unlock()
	_ = p.in.SetWriteDeadline(time.Time{})
	_ = p.out.SetReadDeadline(time.Time{})
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		_ = p.in.SetWriteDeadline(past)
		_ = p.out.SetReadDeadline(past)
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()
	p.wroteNothing = false
	if n, err := p.in.Write(line); err != nil {
		p.wroteNothing = n == 0
		return err
	}
	for {
		raw, err := readLine(p.r, limit)
		if err != nil {
			return err
		}
		if next(raw) {
			return nil
		}
	}
}

// kill sends SIGKILL to the process (through its handle, so never to a
// reused PID); Guard.Wait then kills the rest of its group.
func (p *handlerProc) kill() { _ = p.cmd.Process.Kill() }

// closeFiles closes our ends of its stdin and stdout.
func (p *handlerProc) closeFiles() {
	_ = p.in.Close()
	_ = p.out.Close()
}

// readLine reads one line of at most limit bytes, its "\n" not counted
// (nor returned, nor a "\r" before it).
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		n := len(line) + len(chunk)
		if err == nil {
			n--
		}
		if n > limit {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			line = line[:len(line)-1]
			return bytes.TrimSuffix(line, []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("%w after an unfinished line", io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// itemLine is the line a handler gets for an item.
func itemLine(item Item, cred Credential) ([]byte, error) {
	payload := json.RawMessage(item.Payload)
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return nil, Permanent(errors.New("exec: the item is not valid JSON and cannot be passed in the item line"))
	}
	if !utf8.ValidString(cred.Secret.Reveal()) {
		return nil, Rejected("secret is not valid UTF-8 and cannot be passed in the item line")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		ID           string          `json:"id"`
		Batch        string          `json:"batch"`
		Attempt      int             `json:"attempt"`
		CredentialID string          `json:"credential_id"`
		Secret       string          `json:"secret"`
		Item         json.RawMessage `json:"item"`
	}{item.ID, item.Batch, item.Attempt, cred.ID, cred.Secret.Reveal(), payload})
	if err != nil {
		// Only the payload can fail, and it was checked.
		return nil, Permanent(fmt.Errorf("exec: encoding the item line: %w", err))
	}
	return b.Bytes(), nil // Encode ends it with "\n"; the encoder compacts the payload
}

// answer is a handler's answer line.
type answer struct {
	ID         json.RawMessage            `json:"id"`
	Status     string                     `json:"status"`
	Output     json.RawMessage            `json:"output"`
	Error      json.RawMessage            `json:"error"`
	RetryAfter json.RawMessage            `json:"retry_after"`
	Cost       json.RawMessage            `json:"cost"`
	Headers    map[string]json.RawMessage `json:"headers"`

	id string // ID's string
}

// The answer statuses.
var answerStatuses = []string{"ok", "rate_limited", "rejected", "permanent", "transient"}

// parse reads an answer line; its error says why it is not one.
func (a *answer) parse(line []byte) error {
	t := bytes.TrimSpace(line)
	if len(t) == 0 {
		return errors.New("a blank line")
	}
	if t[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := json.Unmarshal(t, a); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	switch {
	case len(a.ID) == 0 || string(a.ID) == "null":
		return errors.New(`no "id" (an answer echoes its item line's id)`)
	case json.Unmarshal(a.ID, &a.id) != nil:
		return fmt.Errorf(`"id" is %s, not a string (an answer echoes its item line's id)`, headString(a.ID, 40))
	case a.Status == "":
		return errors.New(`no "status"`)
	case !slices.Contains(answerStatuses, a.Status):
		return fmt.Errorf("unknown status %q (want one of %s)", headString([]byte(a.Status), 40), strings.Join(answerStatuses, ", "))
	}
	return nil
}

// lineKind is what a line read while an item waits is to that item.
type lineKind int

const (
	lineAnswer  lineKind = iota // the item's answer: taken
	lineBroken                  // it carries the item's id but is not an answer: the item fails
	lineStray                   // an answer for another item: skipped
	lineUnasked                 // not an answer (a banner, debug output, no id): skipped
)

// readAnswer reads a line written while the item id waits: the answer
// (set for lineAnswer and lineStray), what the line is to the item, and
// why it is not an answer (for lineBroken and lineUnasked).
func readAnswer(line []byte, id string) (answer, lineKind, error) {
	var a answer
	err := a.parse(line)
	switch {
	case err == nil && a.id == id:
		return a, lineAnswer, nil
	case err == nil:
		return a, lineStray, nil
	}
	var head struct {
		ID json.RawMessage `json:"id"`
	}
	var got string
	if json.Unmarshal(bytes.TrimSpace(line), &head) == nil && json.Unmarshal(head.ID, &got) == nil && got == id {
		return a, lineBroken, err
	}
	return a, lineUnasked, err
}

// rates reads the answer's headers as the http kind reads a reply's
// (ParseRateHeaders); a value is a string or a number.
func (a *answer) rates(now time.Time) RateReport {
	if len(a.Headers) == 0 {
		return RateReport{}
	}
	h := make(http.Header, len(a.Headers))
	for name, raw := range a.Headers {
		raw = bytes.TrimSpace(raw)
		var v string
		switch {
		case len(raw) > 0 && raw[0] == '"':
			if json.Unmarshal(raw, &v) != nil {
				continue
			}
		case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
			v = string(raw)
		default:
			continue // null, an object: not a header's value
		}
		h.Add(name, v)
	}
	return ParseRateHeaders(h, now)
}

// errorText is the answer's error field as text (a string's value, other
// JSON as its text), scrubbed and bounded.
func (a *answer) errorText(sc *secret.Scrubber, n int) string {
	raw := bytes.TrimSpace(a.Error)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return headString([]byte(oneLine(sc.String(s))), n)
}

// retryAfter reads retry_after: seconds as a number, or a Retry-After
// header's text. given is false when it is absent or null.
func (a *answer) retryAfter() (d time.Duration, given, ok bool) {
	raw := bytes.TrimSpace(a.RetryAfter)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, false
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return 0, true, false
		}
		d, ok = ParseRetryAfter(s, time.Now())
		return d, true, ok
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f < 0 || math.IsNaN(f) {
		return 0, true, false
	}
	d, ok = secondsToDuration(strconv.FormatFloat(f, 'f', -1, 64))
	return d, true, ok
}

// sourceRetryAfter names where a rest came from.
const sourceRetryAfter = "handler retry_after"

// result maps the answer to the run's Output and error, as exec maps its
// exit statuses; its headers pace the key as a reply's do (the http
// kind's Run).
func (a *answer) result(sc *secret.Scrubber, now time.Time) (Output, error) {
	var out Output
	if o := bytes.TrimSpace(a.Output); len(o) > 0 && string(o) != "null" {
		out.Body = sc.Bytes(o)
	}
	if raw := bytes.TrimSpace(a.Cost); len(raw) > 0 && string(raw) != "null" {
		n, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || n < 0 || n > math.MaxInt64/2 {
			out.CostNote = fmt.Sprintf("unreadable cost %s in the handler's answer (want a number)", headString(sc.Bytes(raw), 64))
		} else {
			out.Cost = max(int64(math.Ceil(n)), 1)
		}
	}
	rates := a.rates(now)
	d, given, ok := a.retryAfter()
	msg := a.errorText(sc, stderrTailMax)
	detail := "status " + a.Status
	if msg != "" {
		detail += ": " + msg
	}
	switch a.Status {
	case "ok":
		out.Signals = rates.Signals
		if ok && d > 0 {
			out.Rest, out.RestFrom = d, sourceRetryAfter
		}
		return out, nil
	case "rate_limited":
		rl := &RateLimitedError{Detail: detail, Signals: rates.Signals}
		switch {
		case given && ok:
			rl.RetryAfter, rl.Source = d, sourceRetryAfter
		case given:
			rl.Detail = fmt.Sprintf("%s (unreadable retry_after %s)", detail, headString(sc.Bytes(a.RetryAfter), 64))
		case rates.RetryAfterFrom != "":
			rl.RetryAfter, rl.Source = rates.RetryAfter, "handler headers: "+rates.RetryAfterFrom
		case rates.Unreadable != "":
			rl.Detail = fmt.Sprintf("%s (unreadable %s in the handler's headers)", detail, rates.Unreadable)
		}
		return out, rl
	case "rejected":
		return out, Rejected(cmp.Or(headString([]byte(msg), reasonMax), "status rejected"))
	case "permanent":
		return out, Permanent(fmt.Errorf("exec: %s", detail))
	default:
		return out, fmt.Errorf("exec: %s", detail)
	}
}

// stderrLines passes a handler's stderr on, line by line, scrubbed, to
// its tail and to the notes. Each line is scrubbed on its own, as it
// arrives, in front of the bound that cuts it (stderrLineMax), so no
// fragment of a secret survives a cut and a line is passed on as soon as
// its newline arrives.
type stderrLines struct {
	p     *handlerProc
	notes *noter
	sc    *secret.Scrubber
	head  headBuffer     // the line so far, scrubbed, bounded
	w     *secret.Writer // scrubs into head; nil between lines
}

func (s *stderrLines) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if s.w == nil {
			s.head = headBuffer{buf: s.head.buf[:0], max: stderrLineMax}
			s.w = s.sc.Writer(&s.head)
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			_, _ = s.w.Write(b)
			break
		}
		_, _ = s.w.Write(b[:i])
		s.flush()
		b = b[i+1:]
	}
	return n, nil
}

// flush passes on the line read so far.
func (s *stderrLines) flush() {
	if s.w == nil {
		return
	}
	_ = s.w.Close()
	s.w = nil
	text := strings.TrimRight(strings.ToValidUTF8(string(s.head.buf), "\uFFFD"), " \t\r")
	if s.head.truncated {
		text = headString([]byte(text), stderrLineMax) + " [cut]"
	}
	s.p.tailMu.Lock()
	_, _ = s.p.tail.Write([]byte(text + "\n"))
	s.p.tailMu.Unlock()
	if strings.TrimSpace(text) != "" {
		s.notes.stderr(s.p.pid, text)
	}
}

// noter rate-limits a handler's notes and passes them to the worker's
// callback.
type noter struct {
	f   func(HandlerNote)
	now func() time.Time // time.Now; a test's clock

	mu     sync.Mutex
	last   map[string]time.Time // when each failure cause was last noted
	held   map[string]int       // notes of each cause held back since
	tokens float64              // stderr lines that may be logged now
	filled time.Time            // when tokens was last refilled
}

func newNoter(f func(HandlerNote)) *noter {
	return &noter{f: f, now: time.Now, last: map[string]time.Time{}, held: map[string]int{}, tokens: stderrLinesBurst, filled: time.Now()}
}

// note passes on a failure or a start: the first of its cause at once,
// then at most one every noteEvery.
func (n *noter) note(cause string, pid int, text string) {
	if n.f == nil {
		return
	}
	n.mu.Lock()
	now := n.now()
	if t, ok := n.last[cause]; ok && now.Sub(t) < noteEvery {
		n.held[cause]++
		n.mu.Unlock()
		return
	}
	dropped := n.held[cause]
	n.last[cause], n.held[cause] = now, 0
	n.mu.Unlock()
	n.f(HandlerNote{Cause: cause, PID: pid, Text: text, Dropped: dropped})
}

// stderr passes on a stderr line, within stderrLinesRate (burst
// stderrLinesBurst) over every process of the handler.
func (n *noter) stderr(pid int, text string) {
	if n.f == nil {
		return
	}
	n.mu.Lock()
	now := n.now()
	n.tokens = min(stderrLinesBurst, n.tokens+now.Sub(n.filled).Seconds()*stderrLinesRate)
	n.filled = now
	if n.tokens < 1 {
		n.held[NoteStderr]++
		n.mu.Unlock()
		return
	}
	n.tokens--
	dropped := n.held[NoteStderr]
	n.held[NoteStderr] = 0
	n.mu.Unlock()
	n.f(HandlerNote{Cause: NoteStderr, PID: pid, Text: text, Dropped: dropped})
}

// The worker closes the handlers it built that are io.Closers.
var _ io.Closer = (*persistentHandler)(nil)
