package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/keyfleet/keyfleet/internal/ctxsleep"
	"github.com/keyfleet/keyfleet/internal/fakeapi"
	"github.com/keyfleet/keyfleet/internal/kftype"
)

// apiServer is internal/fakeapi served on a loopback port for the worker
// processes of a run. It records every answer (when the request came,
// which credential, the status): fakeapi's Stats count, and some figures
// need the order of events.
type apiServer struct {
	api  *fakeapi.Server
	srv  *http.Server
	url  string
	byID map[string]string // "Bearer <secret>" → credential ID

	// on429, when set, sees each 429 before its answer leaves (the
	// handler has not returned: net/http still holds the small reply),
	// and may fill in the event's lease.
	on429 func(ev *apiEvent)

	mu  sync.Mutex
	log []apiEvent
}

// apiEvent is one answered request.
type apiEvent struct {
	at     time.Time // when it came in
	cred   string
	item   string // its X-Keyfleet-Item header
	status int
	limit  string // a 429's: the limit that refused it (fakeapi's "limit": rate, tokens, ...)
	lease  string // a 429's: its lease's fencing token, when on429 found it
}

// startAPI serves fakeapi with cfg; ids are the credential IDs of its keys,
// in order (their secrets are secretOf(id)).
func startAPI(cfg fakeapi.Config, ids []string) (*apiServer, error) {
	a := &apiServer{byID: map[string]string{}}
	for i, id := range ids {
		cfg.Keys[i].Secret = secretOf(id)
		a.byID["Bearer "+secretOf(id)] = id
	}
	api, err := fakeapi.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	a.api = api
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: stand-in API: %w", err)
	}
	a.url = "http://" + l.Addr().String() + "/v1/bench"
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(l) }()
	return a, nil
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	item := r.Header.Get("X-Keyfleet-Item")
	if item == "" {
		// A request a handler sent (not the http kind): its item is the
		// body's "user" (an OpenAI request's end-user field).
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var b struct {
			User string `json:"user"`
		}
		_ = json.Unmarshal(body, &b)
		item = b.User
	}
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	a.api.ServeHTTP(rec, r)
	ev := apiEvent{at: at, cred: a.byID[r.Header.Get("Authorization")], item: item, status: rec.status}
	if rec.status == http.StatusTooManyRequests {
		var body struct {
			Limit string `json:"limit"`
		}
		_ = json.Unmarshal(rec.body, &body) // fakeapi's own JSON; other 429s have no limit
		ev.limit = body.Limit
		if a.on429 != nil {
			a.on429(&ev)
		}
	}
	a.mu.Lock()
	a.log = append(a.log, ev)
	a.mu.Unlock()
}

// events returns the answered requests in the order they came.
func (a *apiServer) events() []apiEvent {
	a.mu.Lock()
	ev := slices.Clone(a.log)
	a.mu.Unlock()
	slices.SortFunc(ev, func(x, y apiEvent) int { return x.at.Compare(y.at) })
	return ev
}

func (a *apiServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// statusWriter keeps the status an answer was written with, and a 429's
// body.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == http.StatusTooManyRequests && len(s.body) < 1<<10 {
		s.body = append(s.body, b...)
	}
	return s.ResponseWriter.Write(b)
}

// per1000 is the 429s per 1,000 requests of fakeapi's figures.
func per1000(st fakeapi.Stats) float64 {
	var req, rl int64
	for _, k := range st.Keys {
		req += k.Requests
		rl += k.RateLimited
	}
	if req == 0 {
		return 0
	}
	return 1000 * float64(rl) / float64(req)
}

// okRate is the steady rate of the 200 answers: those after each
// credential's first over the time from the first to the last (the API
// admits a credential's first request at once).
func okRate(ev []apiEvent) float64 {
	var first, last time.Time
	n := 0
	creds := map[string]bool{}
	for _, e := range ev {
		if e.status != http.StatusOK {
			continue
		}
		if first.IsZero() {
			first = e.at
		}
		last = e.at
		n++
		creds[e.cred] = true
	}
	if n <= len(creds) || !last.After(first) {
		return 0
	}
	return float64(n-len(creds)) / last.Sub(first).Seconds()
}

// convergence is how long after the first request the share of 429s
// over a sliding second last reached `share` or more: the end of the last
// window [t−1s, t) (t in steps of 10 ms, windows inside the run) with at
// least that share, from the first request; 0 when no window had it.
func convergence(ev []apiEvent, share float64) time.Duration {
	if len(ev) == 0 {
		return 0
	}
	start, end := ev[0].at, ev[len(ev)-1].at
	const win, step = time.Second, 10 * time.Millisecond
	var lastBad time.Time
	lo, hi := 0, 0
	var n, bad int
	for t := start.Add(win); !t.After(end); t = t.Add(step) {
		for hi < len(ev) && ev[hi].at.Before(t) {
			n++
			if ev[hi].status == http.StatusTooManyRequests {
				bad++
			}
			hi++
		}
		for lo < hi && ev[lo].at.Before(t.Add(-win)) {
			n--
			if ev[lo].status == http.StatusTooManyRequests {
				bad--
			}
			lo++
		}
		if n > 0 && float64(bad) >= share*float64(n) {
			lastBad = t
		}
	}
	if lastBad.IsZero() {
		return 0
	}
	return lastBad.Sub(start)
}

// credIDs names n credentials prefix0, prefix1, ...
func credIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return ids
}

// dispatchLatency returns, sorted in ms, how long after its lease grant
// (Redis's clock, the results' leased_at) each item's successful request
// reached the API (this machine's clock: the same clock).
func dispatchLatency(ev []apiEvent, rs []kftype.Result) []float64 {
	ok := map[string]time.Time{}
	for _, e := range ev {
		if e.status == http.StatusOK {
			ok[e.item] = e.at
		}
	}
	var d []float64
	for _, r := range rs {
		if at, found := ok[r.Item]; found {
			d = append(d, float64(at.Sub(r.LeasedAt))/float64(time.Millisecond))
		}
	}
	slices.Sort(d)
	return d
}

// windowFromFirst is a runHTTPFleet stop: it waits (at most 30 s) for the
// first request to reach the API, sets *t0 to its arrival, and returns
// window (and 200 ms for the answers on their way) after it.
func (a *apiServer) windowFromFirst(window time.Duration, t0 *time.Time) func(context.Context) error {
	return func(ctx context.Context) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if ev := a.events(); len(ev) > 0 {
				*t0 = ev[0].at
				break
			}
			if time.Now().After(deadline) {
				return errors.New("bench: no request reached the API within 30s")
			}
			if err := ctxsleep.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
		return ctxsleep.Sleep(ctx, time.Until(t0.Add(window+200*time.Millisecond)))
	}
}
