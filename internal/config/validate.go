package config

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keyfleet/keyfleet/pkg/ratelimit"
)

// Validate reports every problem of c in one error (errors.Join of one line
// each, naming c.Source and the key path), or nil. It also sets each
// Credential.Rate from its RateText. Call it again after changing c, such as
// after applying flags.
func (c *Config) Validate() error { return c.check().err(c.Source, nil) }

// check validates c, setting Credential.Rate, and returns the problems.
func (c *Config) check() problems {
	var ps problems
	c.checkNATS(&ps)
	c.checkRedis(&ps)
	c.checkPool(&ps)
	c.checkWorker(&ps)
	c.checkQueue(&ps)
	c.checkJobs(&ps)
	c.checkLog(&ps)
	return ps
}

func (c *Config) checkNATS(ps *problems) {
	n := c.NATS
	if strings.TrimSpace(n.URL) == "" {
		ps.add("nats.url", "must be set, e.g. nats://127.0.0.1:4222")
	} else {
		// A list of servers. Problems are shown against the whole list,
		// redacted, and the server's position: a piece of a URL cut at a
		// comma inside a password would not be recognised as one and would
		// show part of it.
		servers := strings.Split(n.URL, ",")
		for i, u := range servers {
			shown := quote(redactURL(n.URL))
			if len(servers) > 1 {
				shown = fmt.Sprintf("server %d of %s", i+1, shown)
				if !strings.Contains(u, "://") && strings.Contains(n.URL, "@") {
					shown += " (a ',' inside a password must be written %2C)"
				}
			}
			checkServerURL(ps, "nats.url", strings.TrimSpace(u), shown, []string{"nats", "tls", "ws", "wss"}, "nats://host:4222")
		}
	}
	checkTLS(ps, "nats.tls", n.TLS)
	positive(ps, "nats.connect_timeout", n.ConnectTimeout)
	notNegative(ps, "nats.startup_timeout", n.StartupTimeout)
}

func (c *Config) checkRedis(ps *problems) {
	r := c.Redis
	u := strings.TrimSpace(r.URL)
	if u == "" {
		ps.add("redis.url", "must be set, e.g. redis://127.0.0.1:6379/0")
		return
	}
	scheme, rest, ok := strings.Cut(u, "://")
	scheme = strings.ToLower(scheme)
	switch {
	case !ok:
		ps.add("redis.url", "%s has no scheme; want redis://host:6379/0, rediss:// or unix://", quote(redactURL(u)))
		return
	case scheme == "unix":
		if r.Cluster {
			ps.add("redis.cluster", "Redis Cluster needs a redis:// or rediss:// URL, not unix://")
		}
		if !r.TLS.IsZero() {
			ps.add("redis.tls", "is set, but a unix:// socket does not use TLS")
		}
		pu, err := url.Parse(u)
		if err != nil || strings.TrimSpace(pu.Path) == "" {
			ps.add("redis.url", "%s names no socket path; want unix:///path/to/redis.sock", quote(redactURL(u)))
		}
		return
	case scheme != "redis" && scheme != "rediss":
		ps.add("redis.url", "scheme %s is not one of redis, rediss, unix", quote(scheme))
		return
	}
	if scheme == "redis" && !r.TLS.IsZero() {
		ps.add("redis.tls", "is set, but redis.url uses redis://; use rediss:// for TLS")
	}
	checkTLS(ps, "redis.tls", r.TLS)

	// The host part may list several seed nodes for Redis Cluster, which
	// net/url cannot parse; check each, then the rest with the first. The
	// user:password@ part ends at the last '@' (as in redactURL), so that no
	// piece of a password, even one holding '/', is shown as a host.
	userinfo := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
	}
	hosts, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hosts, tail = rest[:i], rest[i:]
	}
	list := strings.Split(hosts, ",")
	if len(list) > 1 && !r.Cluster {
		ps.add("redis.url", "lists %d hosts; set redis.cluster: true for Redis Cluster", len(list))
		return
	}
	for _, h := range list {
		if msg := checkHostPort(h); msg != "" {
			ps.add("redis.url", "%s in %s", msg, quote(redactURL(u)))
			return
		}
	}
	if strings.ContainsAny(userinfo, "/?#") {
		ps.add("redis.url", "the user:password part holds '/', '?' or '#'; percent-encode them (%%2F, %%3F, %%23)")
		return
	}
	if _, err := url.Parse(scheme + "://" + userinfo + list[0] + tail); err != nil {
		ps.add("redis.url", "%s is not a valid URL", quote(redactURL(u)))
		return
	}
	path, _, _ := strings.Cut(tail, "?")
	path, _, _ = strings.Cut(path, "#")
	switch db := strings.Trim(path, "/"); {
	case db == "":
	case strings.Contains(db, "/"):
		ps.add("redis.url", "path %s is not a database number", quote(path))
	default:
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			ps.add("redis.url", "path %s is not a database number", quote(path))
		} else if n != 0 && r.Cluster {
			ps.add("redis.url", "Redis Cluster has only database 0, got %d", n)
		}
	}
}

// checkServerURL checks one server URL against the schemes allowed.
// checkServerURL checks one server URL; shown is how problems name it.
func checkServerURL(ps *problems, key, u, shown string, schemes []string, example string) {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		ps.add(key, "%s has no scheme; want %s (schemes: %s)", shown, example, strings.Join(schemes, ", "))
		return
	}
	known := false
	for _, s := range schemes {
		known = known || strings.EqualFold(scheme, s)
	}
	if !known {
		ps.add(key, "scheme %s is not one of %s", quote(scheme), strings.Join(schemes, ", "))
		return
	}
	if at := strings.LastIndex(u, "@"); at >= 0 && strings.ContainsAny(u[len(scheme)+len("://"):at], "/?#") {
		ps.add(key, "the user:password part holds '/', '?' or '#'; percent-encode them (%%2F, %%3F, %%23)")
		return
	}
	pu, err := url.Parse(u)
	if err != nil {
		ps.add(key, "%s is not a valid URL", shown)
		return
	}
	if pu.Hostname() == "" {
		ps.add(key, "%s names no host; want %s", shown, example)
	}
}

// checkHostPort checks host[:port] of a URL; it returns a message or "".
func checkHostPort(hp string) string {
	if hp == "" {
		return "a host is missing"
	}
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") || strings.Count(hp, ":") == 1 {
		h, p, err := net.SplitHostPort(hp)
		if err != nil {
			if !strings.HasPrefix(hp, "[") || !strings.HasSuffix(hp, "]") {
				return fmt.Sprintf("host %s is not host:port", quote(hp))
			}
			h = strings.Trim(hp, "[]")
		}
		host, port = h, p
	}
	if host == "" || strings.ContainsAny(host, " \t/\\") {
		return fmt.Sprintf("host %s is not host:port", quote(hp))
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %s is not a number from 1 to 65535", quote(port))
		}
	}
	return ""
}

func checkTLS(ps *problems, key string, t TLS) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		ps.add(key+".key_file", "must be set when cert_file is")
	case t.KeyFile != "" && t.CertFile == "":
		ps.add(key+".cert_file", "must be set when key_file is")
	}
}

var (
	poolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	credIDRE   = regexp.MustCompile(`^[A-Za-z0-9_.:@-]+$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (c *Config) checkPool(ps *problems) {
	p := &c.Pool
	if !poolNameRE.MatchString(p.Name) {
		ps.add("pool.name", "%s: want letters, digits, '_', '.' or '-' (at least one)", quote(p.Name))
	}
	atLeast(ps, "pool.lease_ttl", p.LeaseTTL, time.Second)
	notNegative(ps, "pool.cooldown", p.Cooldown)
	firstUse := map[string]string{}
	for i := range p.Credentials {
		cr := &p.Credentials[i]
		key := fmt.Sprintf("pool.credentials[%d]", i)
		switch {
		case cr.ID == "":
			ps.add(key+".id", "must be set")
		case len(cr.ID) > 128 || !credIDRE.MatchString(cr.ID):
			ps.add(key+".id", "%s: want at most 128 letters, digits, '_', '.', ':', '@' or '-'", quote(cr.ID))
		case firstUse[cr.ID] != "":
			ps.add(key+".id", "%s is used twice (also %s)", quote(cr.ID), firstUse[cr.ID])
		default:
			firstUse[cr.ID] = key
		}
		if (cr.SecretEnv == "") == (cr.SecretFile == "") {
			ps.add(key, "set exactly one of secret_env or secret_file")
		}
		if cr.SecretEnv != "" && !envNameRE.MatchString(cr.SecretEnv) {
			// Not quoted: a secret pasted here by mistake must not be printed.
			ps.add(key+".secret_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); "+
				"it names the variable that holds the secret, not the secret itself")
		}
		atLeastInt(ps, key+".max_concurrent", cr.MaxConcurrent, 1)
		switch {
		case cr.RateText != "":
			l, err := ratelimit.ParseLimit(cr.RateText)
			if err != nil {
				ps.add(key+".rate", "%v", err)
			}
			cr.Rate = l
		case !cr.Rate.IsZero():
			if err := cr.Rate.Validate(); err != nil {
				ps.add(key+".rate", "%v", err)
			}
		}
	}
}

func (c *Config) checkWorker(ps *problems) {
	w := c.Worker
	atLeastInt(ps, "worker.concurrency", w.Concurrency, 1)
	notNegative(ps, "worker.shutdown_grace", w.ShutdownGrace)
	atLeastInt(ps, "worker.max_attempts", w.MaxAttempts, 1)
	if len(w.RetryBackoff) == 0 {
		ps.add("worker.retry_backoff", "must list at least one duration, e.g. [1s, 5s, 30s, 2m]")
	}
	for i, d := range w.RetryBackoff {
		notNegative(ps, fmt.Sprintf("worker.retry_backoff[%d]", i), d)
	}
	if w.Listen != "" {
		_, port, err := net.SplitHostPort(w.Listen)
		if err != nil || port == "" {
			ps.add("worker.listen", "%s is not host:port, e.g. 127.0.0.1:9464 or :9464", quote(w.Listen))
		} else if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			ps.add("worker.listen", "port %d is not from 0 to 65535", n)
		}
	}
	positive(ps, "worker.heartbeat", w.Heartbeat)
}

func (c *Config) checkQueue(ps *problems) {
	q := c.Queue
	checkNATSName(ps, "queue.stream", q.Stream)
	checkNATSName(ps, "queue.consumer", q.Consumer)
	checkSubjectPrefix(ps, "queue.subject_prefix", q.SubjectPrefix)
	atLeast(ps, "queue.ack_wait", q.AckWait, time.Second)
	if q.MaxDeliver != -1 && q.MaxDeliver < max(c.Worker.MaxAttempts, 1) {
		ps.add("queue.max_deliver", "must be -1 (unlimited) or at least worker.max_attempts (%d), got %d", c.Worker.MaxAttempts, q.MaxDeliver)
	}
	for i, d := range q.RedeliveryBackoff {
		atLeast(ps, fmt.Sprintf("queue.redelivery_backoff[%d]", i), d, time.Second)
	}
	if len(q.RedeliveryBackoff) > 0 {
		if q.RedeliveryBackoff[0] != q.AckWait {
			ps.add("queue.redelivery_backoff[0]", "must equal queue.ack_wait (%s): JetStream uses it as the ack wait; got %s", q.AckWait, q.RedeliveryBackoff[0])
		}
		if q.MaxDeliver != -1 && len(q.RedeliveryBackoff) > q.MaxDeliver {
			ps.add("queue.redelivery_backoff", "lists %d waits, more than queue.max_deliver (%d) allows", len(q.RedeliveryBackoff), q.MaxDeliver)
		}
	}
	atLeast(ps, "queue.duplicate_window", q.DuplicateWindow, 100*time.Millisecond)
	if q.Replicas < 1 || q.Replicas > 5 {
		ps.add("queue.replicas", "must be from 1 to 5, got %d", q.Replicas)
	}
	if q.Storage != "file" && q.Storage != "memory" {
		ps.add("queue.storage", "must be file or memory, got %s", quote(q.Storage))
	}
	positive(ps, "queue.results_max_age", q.ResultsMaxAge)
}

// checkNATSName checks a stream or consumer name as JetStream does.
func checkNATSName(ps *problems, key, name string) {
	switch {
	case name == "":
		ps.add(key, "must be set")
	case len(name) > 255:
		ps.add(key, "must be at most 255 bytes, got %d", len(name))
	case strings.ContainsAny(name, ".*>/\\") || hasSpaceOrControl(name):
		ps.add(key, "%s: a NATS name cannot hold spaces, '.', '*', '>', '/' or '\\'", quote(name))
	}
}

// checkSubjectPrefix checks a literal subject: dot-separated tokens, no
// wildcards, not in NATS's reserved $ space.
func checkSubjectPrefix(ps *problems, key, s string) {
	if s == "" {
		ps.add(key, "must be set, e.g. keyfleet.items")
		return
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch {
		case tok == "":
			ps.add(key, "%s has an empty token (a leading, trailing or doubled '.')", quote(s))
			return
		case tok == "*" || tok == ">" || strings.ContainsAny(tok, "*>") || hasSpaceOrControl(tok):
			ps.add(key, "%s: subject tokens cannot hold spaces, '*' or '>'", quote(s))
			return
		}
	}
	if strings.HasPrefix(s, "$") {
		ps.add(key, "%s: subjects starting with '$' are reserved for NATS", quote(s))
	}
}

func hasSpaceOrControl(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return true
		}
	}
	return false
}

// execEnvReserved are the variables the worker sets for every exec run.
var execEnvReserved = []string{
	"KEYFLEET_ITEM_ID", "KEYFLEET_BATCH", "KEYFLEET_ATTEMPT",
	"KEYFLEET_CREDENTIAL_ID", "KEYFLEET_CREDENTIAL_SECRET",
}

func (c *Config) checkJobs(ps *problems) {
	j := c.Jobs
	if j.MaxOutput < 0 {
		ps.add("jobs.max_output", "must not be negative, got %d", j.MaxOutput)
	}
	if e := j.Exec; e != nil {
		switch {
		case len(e.Command) == 0:
			ps.add("jobs.exec.command", `must name the program to run, e.g. ["./process.sh"]`)
		case strings.TrimSpace(e.Command[0]) == "":
			ps.add("jobs.exec.command[0]", "must name the program to run")
		}
		positive(ps, "jobs.exec.timeout", e.Timeout)
		for _, name := range slices.Sorted(maps.Keys(e.Env)) {
			key := "jobs.exec.env." + name
			switch {
			case !envNameRE.MatchString(name):
				ps.add(key, "is not an environment variable name (letters, digits and '_', not starting with a digit)")
			case slices.Contains(execEnvReserved, name):
				ps.add(key, "is set by the worker for every run; it cannot be set here")
			}
			if strings.ContainsRune(e.Env[name], 0) {
				ps.add(key, "the value holds a NUL byte")
			}
		}
	}
	if h := j.HTTP; h != nil {
		switch u, err := url.Parse(h.URL); {
		case h.URL == "":
			ps.add("jobs.http.url", "must be set, e.g. https://api.example.com/v1/x")
		case err != nil:
			ps.add("jobs.http.url", "%s is not a valid URL", quote(redactURL(h.URL)))
		case u.Scheme != "http" && u.Scheme != "https":
			ps.add("jobs.http.url", "scheme %s is not http or https", quote(u.Scheme))
		case u.Host == "":
			ps.add("jobs.http.url", "%s names no host", quote(redactURL(h.URL)))
		}
		if !isToken(h.Method) {
			ps.add("jobs.http.method", "%s is not an HTTP method", quote(h.Method))
		}
		if !isToken(h.Header) {
			ps.add("jobs.http.header", "%s is not a header name", quote(h.Header))
		}
		// Not quoted: a format without {secret} may hold a pasted secret.
		if !strings.Contains(h.Format, "{secret}") {
			ps.add("jobs.http.format", "must contain {secret}, where the credential's secret goes (e.g. \"Bearer {secret}\")")
		} else if strings.ContainsAny(h.Format, "\r\n\x00") {
			ps.add("jobs.http.format", "cannot hold a line break or NUL")
		}
		for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
			key := "jobs.http.headers." + name
			switch {
			case !isToken(name):
				ps.add(key, "is not a header name")
			case http.CanonicalHeaderKey(name) == http.CanonicalHeaderKey(h.Header):
				ps.add(key, "clashes with jobs.http.header (%s), which carries the secret", h.Header)
			}
			if strings.ContainsAny(h.Headers[name], "\r\n\x00") {
				ps.add(key, "the value cannot hold a line break or NUL")
			}
		}
		positive(ps, "jobs.http.timeout", h.Timeout)
	}
}

func (c *Config) checkLog(ps *problems) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		ps.add("log.level", "must be debug, info, warn or error, got %s", quote(c.Log.Level))
	}
	switch c.Log.Format {
	case "auto", "json", "console":
	default:
		ps.add("log.format", "must be auto, json or console, got %s", quote(c.Log.Format))
	}
}

// isToken reports whether s is an HTTP token (RFC 9110): a method or a
// header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}

func atLeast(ps *problems, key string, d, least time.Duration) {
	if d < least {
		ps.add(key, "must be at least %s, got %s", least, d)
	}
}

func atLeastInt(ps *problems, key string, n, least int) {
	if n < least {
		ps.add(key, "must be at least %d, got %d", least, n)
	}
}

func notNegative(ps *problems, key string, d time.Duration) {
	if d < 0 {
		ps.add(key, "must not be negative, got %s", d)
	}
}

func positive(ps *problems, key string, d time.Duration) {
	if d <= 0 {
		ps.add(key, "must be more than 0, got %s", d)
	}
}
