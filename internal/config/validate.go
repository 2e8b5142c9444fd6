package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/keyfleet/keyfleet/internal/check"
	"github.com/keyfleet/keyfleet/internal/jobs"
	"github.com/keyfleet/keyfleet/internal/queue"
	"github.com/keyfleet/keyfleet/internal/secret"
	"github.com/keyfleet/keyfleet/internal/spend"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

// Validate reports every problem of c in one error (errors.Join of one line
// each, naming c.Source and the key path), or nil. It changes nothing in
// c. Call it again after changing c, such as after applying flags. Its
// errors name no line: the values may no longer be the file's (Load's
// errors do).
func (c *Config) Validate() error { return fromList(c.validate(), nil, nil).err(c.Source, nil) }

// validate checks c and returns the problems, each keyed by its full key
// path; it writes nothing (what the file's text means is decoded once, by
// the decoder). The rules of a setting whose owner is another package (a
// job kind's section, a stream name) are the owner's.
func (c *Config) validate() check.List {
	var ps check.List
	c.checkNATS(&ps)
	c.checkRedis(&ps)
	c.checkPool(&ps)
	c.checkWorker(&ps)
	c.checkQueue(&ps)
	c.checkJobs(&ps)
	c.checkTenants(&ps)
	c.checkGateway(&ps)
	c.checkLog(&ps)
	return ps
}

func (c *Config) checkNATS(ps *check.List) {
	n := c.NATS
	if strings.TrimSpace(n.URL) == "" {
		ps.Add("nats.url", "must be set, e.g. nats://127.0.0.1:4222")
	} else {
		// A list of servers. Problems are shown against the whole list,
		// redacted, and the server's position: a piece of a URL cut at a
		// comma inside a password would not be recognised as one and would
		// show part of it.
		servers := strings.Split(n.URL, ",")
		for i, u := range servers {
			shown := check.Quote(redactURL(n.URL))
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
	ps.Positive("nats.connect_timeout", n.ConnectTimeout)
	ps.NotNegative("nats.startup_timeout", n.StartupTimeout)
}

func (c *Config) checkRedis(ps *check.List) {
	r := c.Redis
	u := strings.TrimSpace(r.URL)
	if u == "" {
		ps.Add("redis.url", "must be set, e.g. redis://127.0.0.1:6379/0")
		return
	}
	parts, ok := SplitRedisURL(u)
	scheme := strings.ToLower(parts.Scheme)
	switch {
	case !ok:
		ps.Add("redis.url", "%s has no scheme; want redis://host:6379/0, rediss:// or unix://", check.Quote(redactURL(u)))
		return
	case scheme == "unix":
		if r.Cluster {
			ps.Add("redis.cluster", "Redis Cluster needs a redis:// or rediss:// URL, not unix://")
		}
		if !r.TLS.IsZero() {
			ps.Add("redis.tls", "is set, but a unix:// socket does not use TLS")
		}
		pu, err := url.Parse(u)
		if err != nil || strings.TrimSpace(pu.Path) == "" {
			ps.Add("redis.url", "%s names no socket path; want unix:///path/to/redis.sock", check.Quote(redactURL(u)))
		}
		return
	case scheme != "redis" && scheme != "rediss":
		ps.Add("redis.url", "scheme %s is not one of redis, rediss, unix", check.Quote(scheme))
		return
	}
	if scheme == "redis" && !r.TLS.IsZero() {
		ps.Add("redis.tls", "is set, but redis.url uses redis://; use rediss:// for TLS")
	}
	checkTLS(ps, "redis.tls", r.TLS)

	// The host part may list several seed nodes for Redis Cluster, which
	// net/url cannot parse; check each, then the rest with the first.
	userinfo, list, tail := parts.Userinfo, parts.Hosts, parts.Tail
	if len(list) > 1 && !r.Cluster {
		ps.Add("redis.url", "lists %d hosts; set redis.cluster: true for Redis Cluster", len(list))
		return
	}
	for _, h := range list {
		if msg := checkHostPort(h); msg != "" {
			ps.Add("redis.url", "%s in %s", msg, check.Quote(redactURL(u)))
			return
		}
	}
	if strings.ContainsAny(userinfo, "/?#") {
		ps.Add("redis.url", "the user:password part holds '/', '?' or '#'; percent-encode them (%%2F, %%3F, %%23)")
		return
	}
	if _, err := url.Parse(scheme + "://" + userinfo + list[0] + tail); err != nil {
		ps.Add("redis.url", "%s is not a valid URL", check.Quote(redactURL(u)))
		return
	}
	path, _, _ := strings.Cut(tail, "?")
	path, _, _ = strings.Cut(path, "#")
	switch db := strings.Trim(path, "/"); {
	case db == "":
	case strings.Contains(db, "/"):
		ps.Add("redis.url", "path %s is not a database number", check.Quote(path))
	default:
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			ps.Add("redis.url", "path %s is not a database number", check.Quote(path))
		} else if n != 0 && r.Cluster {
			ps.Add("redis.url", "Redis Cluster has only database 0, got %d", n)
		}
	}
}

// RedisURL is a redis.url cut into its parts: Scheme "://" Userinfo Hosts
// Tail. Userinfo keeps its '@' and ends at the last one, so that no piece
// of a password (even one holding '/' or ',') is taken for a host; Hosts
// is the comma-separated host list (Redis Cluster's seed nodes), which
// net/url cannot parse; Tail is the path, query and fragment.
type RedisURL struct {
	Scheme, Userinfo string
	Hosts            []string
	Tail             string
}

// SplitRedisURL cuts u into its parts; false when it has no scheme.
func SplitRedisURL(u string) (RedisURL, bool) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return RedisURL{}, false
	}
	p := RedisURL{Scheme: scheme}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		p.Userinfo, rest = rest[:at+1], rest[at+1:]
	}
	hosts := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		hosts, p.Tail = rest[:i], rest[i:]
	}
	p.Hosts = strings.Split(hosts, ",")
	return p, true
}

// checkServerURL checks one server URL against the schemes allowed.
// checkServerURL checks one server URL; shown is how problems name it.
func checkServerURL(ps *check.List, key, u, shown string, schemes []string, example string) {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		ps.Add(key, "%s has no scheme; want %s (schemes: %s)", shown, example, strings.Join(schemes, ", "))
		return
	}
	known := false
	for _, s := range schemes {
		known = known || strings.EqualFold(scheme, s)
	}
	if !known {
		ps.Add(key, "scheme %s is not one of %s", check.Quote(scheme), strings.Join(schemes, ", "))
		return
	}
	if at := strings.LastIndex(u, "@"); at >= 0 && strings.ContainsAny(u[len(scheme)+len("://"):at], "/?#") {
		ps.Add(key, "the user:password part holds '/', '?' or '#'; percent-encode them (%%2F, %%3F, %%23)")
		return
	}
	pu, err := url.Parse(u)
	if err != nil {
		ps.Add(key, "%s is not a valid URL", shown)
		return
	}
	if pu.Hostname() == "" {
		ps.Add(key, "%s names no host; want %s", shown, example)
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
				return fmt.Sprintf("host %s is not host:port", check.Quote(hp))
			}
			h = strings.Trim(hp, "[]")
		}
		host, port = h, p
	}
	if host == "" || strings.ContainsAny(host, " \t/\\") {
		return fmt.Sprintf("host %s is not host:port", check.Quote(hp))
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %s is not a number from 1 to 65535", check.Quote(port))
		}
	}
	return ""
}

func checkTLS(ps *check.List, key string, t TLS) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		ps.Add(key+".key_file", "must be set when cert_file is")
	case t.KeyFile != "" && t.CertFile == "":
		ps.Add(key+".cert_file", "must be set when key_file is")
	}
}

func (c *Config) checkPool(ps *check.List) {
	p := c.Pool
	if creds.ValidName(p.Name) != nil {
		ps.Add("pool.name", "%s: want letters, digits, '_', '.' or '-' (at least one)", check.Quote(p.Name))
	}
	ps.AtLeast("pool.lease_ttl", p.LeaseTTL, time.Second)
	ps.NotNegative("pool.cooldown", p.Cooldown)
	ps.AtLeast("pool.max_rest", p.MaxRest, time.Second)
	if p.ProbeInterval != 0 {
		ps.AtLeast("pool.probe_interval", p.ProbeInterval, time.Second)
		if !c.Jobs.HasProbe() {
			ps.Add("pool.probe_interval", "is set, but no job kind has a probe: set jobs.http.probe_url or jobs.exec.probe_command (or 0: no probes)")
		}
	}
	firstUse := map[string]string{}
	c.checkAccounts(ps, firstUse)
	for i, cr := range p.Credentials {
		key := fmt.Sprintf("pool.credentials[%d]", i)
		checkPoolID(ps, key, cr.ID, firstUse)
		if (cr.SecretEnv == "") == (cr.SecretFile == "") {
			ps.Add(key, "set exactly one of secret_env or secret_file")
		}
		if cr.SecretEnv != "" && !jobs.ValidEnvName(cr.SecretEnv) {
			// Not quoted: a secret pasted here by mistake must not be printed.
			ps.Add(key+".secret_env", "is not an environment variable name (letters, digits and '_', not starting with a digit); "+
				"it names the variable that holds the secret, not the secret itself")
		}
		ps.AtLeastInt(key+".max_concurrent", cr.MaxConcurrent, 1)
		if !cr.Rate.IsZero() {
			if err := creds.RateLimit(cr.Rate).Validate(); err != nil {
				ps.Add(key+".rate", "%s", limitMsg(err))
			}
		}
		c.checkLimits(ps, key, cr.Limits)
		if cr.URL != "" {
			if u, err := url.Parse(cr.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				ps.Add(key+".url", "%s is not an http or https URL (the key's own base URL, such as https://east.example.com)", check.Quote(secret.RedactURL(cr.URL)))
			}
		}
		for j, g := range cr.Groups {
			if err := creds.ValidID(g); err != nil {
				ps.Add(fmt.Sprintf("%s.groups[%d]", key, j), "%s: want at most 128 letters, digits, '_', '.', ':', '@' or '-'", check.Quote(g))
			}
		}
		if cr.Account != "" && !slices.ContainsFunc(p.Accounts, func(a Account) bool { return a.ID == cr.Account }) {
			ps.Add(key+".account", "%s is not an account of pool.accounts", check.Quote(cr.Account))
		}
	}
	if p.Cost.Field == "" {
		ps.Add("pool.cost.field", "must name the items' cost field, e.g. cost")
	} else {
		checkField(ps, "pool.cost.field", p.Cost.Field)
	}
	if p.Cost.Default < 1 {
		ps.Add("pool.cost.default", "must be at least 1, got %d", p.Cost.Default)
	}
	if p.Scope.Field != "" {
		checkField(ps, "pool.scope.field", p.Scope.Field)
	}
	for _, model := range slices.Sorted(maps.Keys(p.Prices)) {
		pr := p.Prices[model]
		for _, f := range []struct {
			name string
			v    float64
		}{{"input", pr.Input}, {"output", pr.Output}} {
			if !spend.ValidPrice(f.v) {
				ps.Add("pool.prices."+model+"."+f.name, "must be a price per 1,000,000 tokens, 0 or more, got %v", f.v)
			}
		}
	}
	if !(p.BatchAPIDiscount > 0 && p.BatchAPIDiscount <= 1) {
		ps.Add("pool.batch_api_discount", "must be above 0 and at most 1 (the share of the price a Batch API request pays), got %v", p.BatchAPIDiscount)
	}
}

// checkPoolID checks the id of the credential or account at key: set,
// valid, and not the ID of another credential or account of the pool
// (firstUse: the key of each ID seen). It reports whether the ID is new
// and valid (then it is recorded).
func checkPoolID(ps *check.List, key, id string, firstUse map[string]string) bool {
	switch {
	case id == "":
		ps.Add(key+".id", "must be set")
	case creds.ValidID(id) != nil:
		ps.Add(key+".id", "%s: want at most 128 letters, digits, '_', '.', ':', '@' or '-'", check.Quote(id))
	case firstUse[id] != "":
		ps.Add(key+".id", "%s is used twice (also %s)", check.Quote(id), firstUse[id])
	default:
		firstUse[id] = key
		return true
	}
	return false
}

// checkLimits checks the limits of the credential or account at key.
func (c *Config) checkLimits(ps *check.List, key string, limits []creds.Limit) {
	for j, l := range limits {
		lkey := fmt.Sprintf("%s.limits[%d]", key, j)
		if err := l.Validate(); err != nil {
			ps.Add(lkey, "%s", limitMsg(err))
		}
		if l.Scope != "" && c.Pool.Scope.Field == "" && !c.Jobs.HasProvider() {
			ps.Add(lkey+".scope", "a scoped limit needs pool.scope.field (the items' field holding their scope, e.g. model) or a kind with a provider (its items' scope is their model)")
		}
	}
}

// checkAccounts checks pool.accounts: IDs (recorded in firstUse, which
// the credentials' IDs must not repeat), limits, and enclosing accounts
// that exist and do not form a cycle.
func (c *Config) checkAccounts(ps *check.List, firstUse map[string]string) {
	p := c.Pool
	index := map[string]int{}
	for i, a := range p.Accounts {
		key := fmt.Sprintf("pool.accounts[%d]", i)
		if checkPoolID(ps, key, a.ID, firstUse) {
			index[a.ID] = i
		}
		c.checkLimits(ps, key, a.Limits)
	}
	for i, a := range p.Accounts {
		if a.Account == "" {
			continue
		}
		key := fmt.Sprintf("pool.accounts[%d].account", i)
		if _, ok := index[a.Account]; !ok {
			ps.Add(key, "%s is not an account of pool.accounts", check.Quote(a.Account))
			continue
		}
		chain := []string{a.ID}
		for up := a.Account; up != ""; {
			if up == a.ID {
				ps.Add(key, "accounts enclose each other in a cycle: %s", strings.Join(append(chain, up), " -> "))
				break
			}
			chain = append(chain, up)
			if len(chain) > creds.MaxAccountDepth {
				ps.Add(key, "more than %d accounts enclose each other: %s", creds.MaxAccountDepth, strings.Join(chain, " -> "))
				break
			}
			j, ok := index[up]
			if !ok {
				break // reported on its own line
			}
			up = p.Accounts[j].Account
		}
	}
}

// checkTenants checks each tenant: a name, a weight, a budget.
func (c *Config) checkTenants(ps *check.List) {
	for _, name := range slices.Sorted(maps.Keys(c.Tenants)) {
		key, t := "tenants."+name, c.Tenants[name]
		if err := queue.CheckTenant(name); err != nil {
			ps.Add(key, "%v", err)
		}
		if t.Weight < 1 || t.Weight > 1000 {
			ps.Add(key+".weight", "must be 1 to 1000, got %d", t.Weight)
		}
		if t.Budget != "" {
			if _, err := spend.ParseBudget(t.Budget); err != nil {
				ps.Add(key+".budget", "%v", err)
			}
		}
	}
}

// checkField checks the name of an item's top-level field (pool.cost.field,
// pool.scope.field): the item's own key, not a path into it.
func checkField(ps *check.List, key, name string) {
	switch {
	case strings.TrimSpace(name) != name || strings.IndexFunc(name, unicode.IsControl) >= 0:
		ps.Add(key, "%s: a field name has no surrounding white space or control characters", check.Quote(name))
	case strings.Contains(name, "."):
		ps.Add(key, "%s: name an item's top-level field; a path into it (a.b) is not read", check.Quote(name))
	}
}

func (c *Config) checkWorker(ps *check.List) {
	w := c.Worker
	ps.AtLeastInt("worker.concurrency", w.Concurrency, 1)
	ps.NotNegative("worker.shutdown_grace", w.ShutdownGrace)
	ps.AtLeastInt("worker.max_attempts", w.MaxAttempts, 1)
	ps.AtLeastInt("worker.max_rate_limited", w.MaxRateLimited, 1)
	if len(w.RetryBackoff) == 0 {
		ps.Add("worker.retry_backoff", "must list at least one duration, e.g. [1s, 5s, 30s, 2m]")
	}
	for i, d := range w.RetryBackoff {
		ps.NotNegative(fmt.Sprintf("worker.retry_backoff[%d]", i), d)
	}
	if w.Listen != "" {
		_, port, err := net.SplitHostPort(w.Listen)
		if err != nil || port == "" {
			ps.Add("worker.listen", "%s is not host:port, e.g. 127.0.0.1:9464 or :9464", check.Quote(w.Listen))
		} else if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			ps.Add("worker.listen", "port %d is not from 0 to 65535", n)
		}
	}
	ps.Positive("worker.heartbeat", w.Heartbeat)
}

func (c *Config) checkQueue(ps *check.List) {
	q := c.Queue
	ps.Err("queue.stream", queue.CheckName(q.Stream))
	ps.Err("queue.consumer", queue.CheckConsumerName(q.Consumer))
	ps.Err("queue.subject_prefix", queue.CheckSubjectPrefix(q.SubjectPrefix))
	ps.AtLeast("queue.ack_wait", q.AckWait, time.Second)
	if q.MaxDeliver != -1 && q.MaxDeliver < max(c.Worker.MaxAttempts, 1) {
		ps.Add("queue.max_deliver", "must be -1 (unlimited) or at least worker.max_attempts (%d), got %d", c.Worker.MaxAttempts, q.MaxDeliver)
	}
	for i, d := range q.RedeliveryBackoff {
		ps.AtLeast(fmt.Sprintf("queue.redelivery_backoff[%d]", i), d, time.Second)
	}
	if len(q.RedeliveryBackoff) > 0 {
		if q.RedeliveryBackoff[0] != q.AckWait {
			ps.Add("queue.redelivery_backoff[0]", "must equal queue.ack_wait (%s): JetStream uses it as the ack wait; got %s", q.AckWait, q.RedeliveryBackoff[0])
		}
		if q.MaxDeliver != -1 && len(q.RedeliveryBackoff) > q.MaxDeliver {
			ps.Add("queue.redelivery_backoff", "lists %d waits, more than queue.max_deliver (%d) allows", len(q.RedeliveryBackoff), q.MaxDeliver)
		}
	}
	ps.AtLeast("queue.duplicate_window", q.DuplicateWindow, 100*time.Millisecond)
	if q.Replicas < 1 || q.Replicas > 5 {
		ps.Add("queue.replicas", "must be from 1 to 5, got %d", q.Replicas)
	}
	if q.Storage != "file" && q.Storage != "memory" {
		ps.Add("queue.storage", "must be file or memory, got %s", check.Quote(q.Storage))
	}
	ps.Positive("queue.results_max_age", q.ResultsMaxAge)
}

func (c *Config) checkJobs(ps *check.List) {
	j := c.Jobs
	if j.MaxOutput < 0 {
		ps.Add("jobs.max_output", "must not be negative, got %d", j.MaxOutput)
	}
	ps.Positive("jobs.batch_api.poll", j.BatchAPI.Poll)
	ps.Positive("jobs.batch_api.margin", j.BatchAPI.Margin)
	// Each configured kind's section, by the kind's own rules.
	for _, k := range jobs.Kinds() {
		if sec, ok := j.Section(k.Name); ok && sec != nil {
			addSection(ps, "jobs."+k.Name, sec.Check())
		}
	}
	// Named kinds: a name the queue can carry and no built-in kind has,
	// one section checked as the built-in kind's, keys that exist.
	for _, name := range j.KindNames() {
		key, k := "jobs.kinds."+name, j.Kinds[name]
		if err := queue.CheckKindName(name); err != nil {
			ps.Add(key, "%v", err)
		} else if _, builtin := jobs.Lookup(name); builtin {
			ps.Add(key, "%s is a built-in kind (configure it as jobs.%s); name yours differently", check.Quote(name), name)
		}
		if base, sec, ok := k.section(); ok {
			addSection(ps, key+"."+base.Name, sec.Check())
		} else {
			ps.Add(key, "set exactly one of http or exec")
		}
		if k.Credentials != nil && len(k.Credentials) == 0 {
			ps.Add(key+".credentials", "lists no key; leave it out for every key of the pool")
		}
		for i, cred := range k.Credentials {
			if !c.namesKey(cred) {
				ps.Add(fmt.Sprintf("%s.credentials[%d]", key, i), "%s names no key: no credential has it as its id or among its groups", check.Quote(cred))
			}
		}
	}
	c.checkFallbacks(ps)
}

// namesKey reports whether name is a credential's ID or one of its groups.
func (c *Config) namesKey(name string) bool {
	return slices.ContainsFunc(c.Pool.Credentials, func(cr Credential) bool { return cr.namedBy(name) })
}

// addSection adds the problems an owner found in the section at key path
// section.
func addSection(ps *check.List, section string, l check.List) {
	for _, p := range l {
		ps.Add(check.Join(section, p.Key), "%s", p.Msg)
	}
}

func (c *Config) checkLog(ps *check.List) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		ps.Add("log.level", "must be debug, info, warn or error, got %s", check.Quote(c.Log.Level))
	}
	switch c.Log.Format {
	case "auto", "json", "console":
	default:
		ps.Add("log.format", "must be auto, json or console, got %s", check.Quote(c.Log.Format))
	}
}
