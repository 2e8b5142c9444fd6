package config_test

import (
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/config"
)

// TestLoadErrors checks the exact error for each kind of mistake. FILE in
// want stands for the file's path. Every line of the error must be listed.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		// Decoding: the line, and the key path.
		{
			name: "unknown key in a credential",
			yaml: "pool:\n  name: default\n  credentials:\n    - id: key-a\n      secret_envv: KEY_A\n",
			want: []string{`config: FILE: line 5: unknown key "pool.credentials[0].secret_envv" (did you mean "secret_env"?)`},
		},
		{
			name: "unknown top-level key",
			yaml: "nats: {url: nats://n:4222}\nworkers: {concurrency: 2}\n",
			want: []string{`config: FILE: line 2: unknown key "workers" (did you mean "worker"?)`},
		},
		{
			name: "unknown key, nothing close",
			yaml: "jobs:\n  exec: {command: [x], shell: bash}\n",
			want: []string{`config: FILE: line 2: unknown key "jobs.exec.shell"`},
		},
		{
			name: "not a duration",
			yaml: "pool:\n  name: default\n  lease_ttl: 3x\n",
			want: []string{`config: FILE: line 3: pool.lease_ttl: "3x" is not a duration (e.g. 30s, 5m)`},
		},
		{
			name: "a bare number is not a duration",
			yaml: "worker:\n  shutdown_grace: 20\n",
			want: []string{`config: FILE: line 2: worker.shutdown_grace: "20" is not a duration (e.g. 30s, 5m)`},
		},
		{
			name: "not a duration in a list",
			yaml: "worker:\n  retry_backoff: [1s, soon]\n",
			want: []string{`config: FILE: line 2: worker.retry_backoff[1]: "soon" is not a duration (e.g. 30s, 5m)`},
		},
		{
			name: "not a whole number",
			yaml: "worker:\n  concurrency: three\n",
			want: []string{`config: FILE: line 2: worker.concurrency: "three" is not a whole number`},
		},
		{
			name: "not true or false",
			yaml: "redis:\n  cluster: maybe\n",
			want: []string{`config: FILE: line 2: redis.cluster: "maybe" is not true or false`},
		},
		{
			name: "a list where a mapping goes",
			yaml: "nats: [nats://n:4222]\n",
			want: []string{`config: FILE: line 1: nats: want a mapping of keys, got a list`},
		},
		{
			name: "a mapping where a string goes",
			yaml: "log:\n  level: {name: info}\n",
			want: []string{`config: FILE: line 2: log.level: want a string, got a mapping`},
		},
		{
			name: "a string where a list goes",
			yaml: "jobs:\n  exec:\n    command: ./process.sh\n",
			want: []string{`config: FILE: line 3: jobs.exec.command: want a list, got "./process.sh"`},
		},
		{
			name: "empty list item",
			yaml: "pool:\n  credentials:\n    -\n    - {id: a, secret_env: A}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0]: empty list item`},
		},
		{
			name: "not a size",
			yaml: "jobs:\n  max_output: 64KB\n",
			want: []string{`config: FILE: line 2: jobs.max_output: "64KB" is not a size (a number of bytes, or with a KiB, MiB or GiB suffix, e.g. 64KiB)`},
		},
		{
			name: "negative size",
			yaml: "jobs:\n  max_output: -1\n",
			want: []string{`config: FILE: line 2: jobs.max_output: "-1" is not a size (a number of bytes, or with a KiB, MiB or GiB suffix, e.g. 64KiB)`},
		},
		{
			name: "key set twice",
			yaml: "pool:\n  name: a\n  lease_ttl: 30s\n  name: b\n",
			want: []string{`config: FILE: line 4: key "pool.name" is set twice (also line 2)`},
		},
		{
			name: "top level not a mapping",
			yaml: "just some words\n",
			want: []string{`config: FILE: line 1: want a mapping of keys at the top level, got "just some words"`},
		},
		{
			name: "not YAML",
			yaml: "nats:\n  url: [nats://n:4222\n",
			want: []string{`config: FILE: line 2: not valid YAML: did not find expected ',' or ']'`},
		},
		{
			name: "tab indentation",
			yaml: "nats:\n\turl: nats://n:4222\n",
			want: []string{`config: FILE: line 2: not valid YAML: found character that cannot start any token`},
		},
		{
			name: "two documents",
			yaml: "nats: {url: nats://n:4222}\n---\nredis: {url: redis://r:6379/0}\n",
			want: []string{`config: FILE: line 2: a second YAML document starts here; the file must hold only one`},
		},
		{
			name: "merge of a scalar",
			yaml: "worker:\n  <<: 3\n",
			want: []string{`config: FILE: line 2: worker: a merge (<<) takes a mapping or a list of mappings`},
		},
		{
			name: "every decoding problem at once",
			yaml: "worker:\n  concurrency: three\n  heartbeat: 5\npool:\n  nme: x\n",
			want: []string{
				`config: FILE: line 2: worker.concurrency: "three" is not a whole number`,
				`config: FILE: line 3: worker.heartbeat: "5" is not a duration (e.g. 30s, 5m)`,
				`config: FILE: line 5: unknown key "pool.nme" (did you mean "name"?)`,
			},
		},

		// Validation: the line, and the key path (of the nearest key the
		// file sets when the key itself is missing).
		{
			name: "bad rate",
			yaml: "pool:\n  credentials:\n    - {id: a, secret_env: A, rate: 60/m}\n    - {id: b, secret_env: B, rate: 60/w}\n",
			want: []string{`config: FILE: line 4: pool.credentials[1].rate: "60/w": period "w" is neither a unit (s, m, h, d) nor a duration like 30s`},
		},
		{
			name: "concurrency 0",
			yaml: "worker:\n  concurrency: 0\n",
			want: []string{`config: FILE: line 2: worker.concurrency: must be at least 1, got 0`},
		},
		{
			name: "id used twice",
			yaml: "pool:\n  credentials:\n    - {id: key-a, secret_env: A}\n    - {id: key-b, secret_env: B}\n    - {id: key-a, secret_env: C}\n",
			want: []string{`config: FILE: line 5: pool.credentials[2].id: "key-a" is used twice (also pool.credentials[0])`},
		},
		{
			name: "both secret_env and secret_file",
			yaml: "pool:\n  credentials:\n    - {id: a, secret_env: A, secret_file: /run/secrets/a}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0]: set exactly one of secret_env or secret_file`},
		},
		{
			name: "neither secret_env nor secret_file",
			yaml: "pool:\n  credentials:\n    - {id: a}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0]: set exactly one of secret_env or secret_file`},
		},
		{
			name: "credential without id",
			yaml: "pool:\n  credentials:\n    - {secret_env: A}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0].id: must be set`},
		},
		{
			name: "credential id with a hash tag brace",
			yaml: "pool:\n  credentials:\n    - {id: 'a{b}', secret_env: A}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0].id: "a{b}": want at most 128 letters, digits, '_', '.', ':', '@' or '-'`},
		},
		{
			name: "max_concurrent 0",
			yaml: "pool:\n  credentials:\n    - {id: a, secret_env: A, max_concurrent: 0}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0].max_concurrent: must be at least 1, got 0`},
		},
		{
			name: "max_concurrent 0, block style",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      max_concurrent: 0\n",
			want: []string{`config: FILE: line 5: pool.credentials[0].max_concurrent: must be at least 1, got 0`},
		},
		{
			name: "bad limits",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      limits:\n        - {rate: 10/s, burst: 0}\n        - {cost: 5/w}\n        - {rate: 1/s, cost: 5/s}\n        - {cost: 5/s, burst: 2}\n",
			want: []string{
				`config: FILE: line 6: pool.credentials[0].limits[0].burst: must be at least 1, got 0`,
				`config: FILE: line 7: pool.credentials[0].limits[1].cost: "5/w": period "w" is neither a unit (s, m, h, d) nor a duration like 30s`,
				`config: FILE: line 8: pool.credentials[0].limits[2]: a limit is either a rate or a cost, not both: give two limits`,
				`config: FILE: line 9: pool.credentials[0].limits[3].burst: applies to rate limits only`,
			},
		},
		{
			name: "bad limits, block style",
			yaml: "pool:\n  scope: {field: model}\n  credentials:\n    - id: a\n      secret_env: A\n      limits:\n" +
				"        - rate: 10/s\n          burst: two\n" +
				"        - burst: 2\n" +
				"        - 500/m\n" +
				"        - cost: 5/s\n          scop: gpt-4o\n" +
				"        - cost: 5/s\n          scope: gpt 4o\n" +
				"        - cost: 5/s\n          scope: ''\n" +
				"        - rate: [5/s]\n",
			want: []string{
				`config: FILE: line 8: pool.credentials[0].limits[0].burst: "two" is not a whole number`,
				`config: FILE: line 9: pool.credentials[0].limits[1]: give rate: N/PERIOD (starts) or cost: N/PERIOD (cost units), e.g. {rate: 500/m}`,
				`config: FILE: line 10: pool.credentials[0].limits[2]: want a mapping of keys, got "500/m"`,
				`config: FILE: line 12: unknown key "pool.credentials[0].limits[3].scop" (did you mean "scope"?)`,
				`config: FILE: line 14: pool.credentials[0].limits[4].scope: "gpt 4o" holds " ": use printable characters other than space , ; = |`,
				`config: FILE: line 16: pool.credentials[0].limits[5].scope: is empty; leave scope out for a limit on every start`,
				`config: FILE: line 17: pool.credentials[0].limits[6].rate: want N/PERIOD (e.g. 60/m), got a list`,
			},
		},
		{
			name: "a period the pool cannot keep",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      rate: 1/1.0000005s\n      limits: [{cost: 5/1.0000005s}]\n",
			want: []string{
				`config: FILE: line 6: pool.credentials[0].limits[0]: period 1.0000005s is not a whole number of microseconds`,
			},
		},
		{
			name: "a rate the pool cannot keep",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      rate: 1/1.0000005s\n",
			want: []string{
				`config: FILE: line 5: pool.credentials[0].rate: period 1.0000005s is not a whole number of microseconds`,
			},
		},
		{
			name: "a scoped limit without pool.scope.field",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      limits:\n        - rate: 5/s\n          scope: gpt-4o\n        - {cost: 100/m, scope: gpt-4o-mini}\n",
			want: []string{
				`config: FILE: line 7: pool.credentials[0].limits[0].scope: a scoped limit needs pool.scope.field (the items' field holding their scope, e.g. model) or a kind with a provider (its items' scope is their model)`,
				`config: FILE: line 8: pool.credentials[0].limits[1].scope: a scoped limit needs pool.scope.field (the items' field holding their scope, e.g. model) or a kind with a provider (its items' scope is their model)`,
			},
		},
		{
			name: "scope and cost fields",
			yaml: "pool:\n  scope: {field: meta.model}\n  cost:\n    field: ' tokens'\n",
			want: []string{
				`config: FILE: line 4: pool.cost.field: " tokens": a field name has no surrounding white space or control characters`,
				`config: FILE: line 2: pool.scope.field: "meta.model": name an item's top-level field; a path into it (a.b) is not read`,
			},
		},
		{
			name: "credential groups",
			yaml: "pool:\n  credentials:\n    - id: a\n      secret_env: A\n      groups:\n        - llm\n        - 'my group'\n        - ''\n",
			want: []string{
				`config: FILE: line 7: pool.credentials[0].groups[1]: "my group": want at most 128 letters, digits, '_', '.', ':', '@' or '-'`,
				`config: FILE: line 8: pool.credentials[0].groups[2]: "": want at most 128 letters, digits, '_', '.', ':', '@' or '-'`,
			},
		},
		{
			name: "accounts: unknown, cyclic, twice, an ID a key has",
			yaml: "pool:\n  accounts:\n    - {id: a, account: b}\n    - {id: b, account: a}\n    - {id: c, account: nope}\n" +
				"    - {id: a}\n    - {id: k1}\n  credentials:\n    - {id: k1, secret_env: K1, account: zz}\n",
			want: []string{
				`config: FILE: line 6: pool.accounts[3].id: "a" is used twice (also pool.accounts[0])`,
				`config: FILE: line 3: pool.accounts[0].account: accounts enclose each other in a cycle: a -> b -> a`,
				`config: FILE: line 4: pool.accounts[1].account: accounts enclose each other in a cycle: b -> a -> b`,
				`config: FILE: line 5: pool.accounts[2].account: "nope" is not an account of pool.accounts`,
				`config: FILE: line 9: pool.credentials[0].id: "k1" is used twice (also pool.accounts[4])`,
				`config: FILE: line 9: pool.credentials[0].account: "zz" is not an account of pool.accounts`,
			},
		},
		{
			name: "kind names",
			yaml: "jobs:\n  kinds:\n    chat.v2: {http: {url: 'https://a.example/x'}}\n    http: {http: {url: 'https://a.example/x'}}\n    'my kind': {exec: {command: [x]}}\n",
			want: []string{
				`config: FILE: line 3: jobs.kinds.chat.v2: "chat.v2": a kind's name holds only letters, digits, '_' and '-' (it is a subject token)`,
				`config: FILE: line 4: jobs.kinds.http: "http" is a built-in kind (configure it as jobs.http); name yours differently`,
				`config: FILE: line 5: jobs.kinds.my kind: "my kind": a kind's name holds only letters, digits, '_' and '-' (it is a subject token)`,
			},
		},
		{
			name: "kind with both or neither of http and exec",
			yaml: "jobs:\n  kinds:\n    both:\n      http: {url: 'https://a.example/x'}\n      exec: {command: [x]}\n    neither:\n      credentials: []\n",
			want: []string{
				`config: FILE: line 3: jobs.kinds.both: set exactly one of http or exec`,
				`config: FILE: line 6: jobs.kinds.neither: set exactly one of http or exec`,
				`config: FILE: line 7: jobs.kinds.neither.credentials: lists no key; leave it out for every key of the pool`,
			},
		},
		{
			name: "kind sections are checked as jobs.http and jobs.exec",
			yaml: "jobs:\n  kinds:\n    chat:\n      http:\n        url: 'ftp://a.example/x'\n        format: 'Bearer {token}'\n    resize:\n      exec: {timeout: 0s}\n",
			want: []string{
				`config: FILE: line 5: jobs.kinds.chat.http.url: scheme "ftp" is not http or https`,
				`config: FILE: line 6: jobs.kinds.chat.http.format: must contain {secret}, where the credential's secret goes (e.g. "Bearer {secret}")`,
				`config: FILE: line 8: jobs.kinds.resize.exec.command: must name the program to run, e.g. ["./process.sh"]`,
				`config: FILE: line 8: jobs.kinds.resize.exec.timeout: must be more than 0, got 0s`,
			},
		},
		{
			name: "kind credentials that name no key",
			yaml: "pool:\n  credentials:\n    - {id: key-a, secret_env: A, groups: [llm]}\n    - {id: key-b, secret_env: B}\n" +
				"jobs:\n  kinds:\n    chat:\n      http: {url: 'https://a.example/x'}\n      credentials:\n        - llm\n        - key-b\n        - emb\n        - key-c\n",
			want: []string{
				`config: FILE: line 12: jobs.kinds.chat.credentials[2]: "emb" names no key: no credential has it as its id or among its groups`,
				`config: FILE: line 13: jobs.kinds.chat.credentials[3]: "key-c" names no key: no credential has it as its id or among its groups`,
			},
		},
		{
			name: "kind defined twice",
			yaml: "jobs:\n  kinds:\n    chat: {http: {url: 'https://a.example/x'}}\n    embed: {exec: {command: [x]}}\n    chat: {exec: {command: [y]}}\n",
			want: []string{`config: FILE: line 5: key "jobs.kinds.chat" is set twice (also line 3)`},
		},
		{
			name: "unknown key in a kind",
			yaml: "jobs:\n  kinds:\n    chat:\n      htp: {url: 'https://a.example/x'}\n      credential: [llm]\n",
			want: []string{
				`config: FILE: line 4: unknown key "jobs.kinds.chat.htp" (did you mean "http"?)`,
				`config: FILE: line 5: unknown key "jobs.kinds.chat.credential" (did you mean "credentials"?)`,
			},
		},
		{
			name: "bad cost settings",
			yaml: "pool:\n  cost: {field: '', default: 0}\n",
			want: []string{
				`config: FILE: line 2: pool.cost.field: must name the items' cost field, e.g. cost`,
				`config: FILE: line 2: pool.cost.default: must be at least 1, got 0`,
			},
		},
		{
			name: "secret_env not a variable name",
			yaml: "pool:\n  credentials:\n    - {id: a, secret_env: 'sk-live-0123'}\n",
			want: []string{`config: FILE: line 3: pool.credentials[0].secret_env: is not an environment variable name (letters, digits and '_', not starting with a digit); it names the variable that holds the secret, not the secret itself`},
		},
		{
			name: "negative durations",
			yaml: "nats:\n  startup_timeout: -1s\npool:\n  cooldown: -5s\nworker:\n  shutdown_grace: -1s\n  retry_backoff: [1s, -2s]\n",
			want: []string{
				`config: FILE: line 2: nats.startup_timeout: must not be negative, got -1s`,
				`config: FILE: line 4: pool.cooldown: must not be negative, got -5s`,
				`config: FILE: line 6: worker.shutdown_grace: must not be negative, got -1s`,
				`config: FILE: line 7: worker.retry_backoff[1]: must not be negative, got -2s`,
			},
		},
		{
			name: "lease_ttl under 1s",
			yaml: "pool:\n  lease_ttl: 500ms\n",
			want: []string{`config: FILE: line 2: pool.lease_ttl: must be at least 1s, got 500ms`},
		},
		{
			name: "retry_backoff empty",
			yaml: "worker:\n  retry_backoff: []\n",
			want: []string{`config: FILE: line 2: worker.retry_backoff: must list at least one duration, e.g. [1s, 5s, 30s, 2m]`},
		},
		{
			name: "retry_backoff null",
			yaml: "worker:\n  retry_backoff:\n",
			want: []string{`config: FILE: line 2: worker.retry_backoff: must list at least one duration, e.g. [1s, 5s, 30s, 2m]`},
		},
		{
			name: "max_attempts 0 and heartbeat 0",
			yaml: "worker:\n  max_attempts: 0\n  heartbeat: 0s\n",
			want: []string{
				`config: FILE: line 2: worker.max_attempts: must be at least 1, got 0`,
				`config: FILE: line 3: worker.heartbeat: must be more than 0, got 0s`,
			},
		},
		{
			name: "listen not host:port",
			yaml: "worker:\n  listen: 9464\n",
			want: []string{`config: FILE: line 2: worker.listen: "9464" is not host:port, e.g. 127.0.0.1:9464 or :9464`},
		},
		{
			name: "storage",
			yaml: "queue:\n  storage: disk\n",
			want: []string{`config: FILE: line 2: queue.storage: must be file or memory, got "disk"`},
		},
		{
			name: "log level and format",
			yaml: "log:\n  level: verbose\n  format: xml\n",
			want: []string{
				`config: FILE: line 2: log.level: must be debug, info, warn or error, got "verbose"`,
				`config: FILE: line 3: log.format: must be auto, json or console, got "xml"`,
			},
		},
		{
			name: "pool name",
			yaml: "pool:\n  name: my pool\n",
			want: []string{`config: FILE: line 2: pool.name: "my pool": want letters, digits, '_', '.' or '-' (at least one)`},
		},
		{
			name: "empty pool name",
			yaml: "pool:\n  name: ''\n",
			want: []string{`config: FILE: line 2: pool.name: "": want letters, digits, '_', '.' or '-' (at least one)`},
		},
		{
			name: "stream and consumer names",
			yaml: "queue:\n  stream: KEY.FLEET\n  consumer: my workers\n",
			want: []string{
				`config: FILE: line 2: queue.stream: "KEY.FLEET": a NATS name cannot hold spaces, '.', '*', '>', '/' or '\'`,
				`config: FILE: line 3: queue.consumer: "my workers": a NATS name cannot hold spaces, '.', '*', '>', '/' or '\'`,
			},
		},
		{
			name: "subject prefix with a wildcard",
			yaml: "queue:\n  subject_prefix: keyfleet.*\n",
			want: []string{`config: FILE: line 2: queue.subject_prefix: "keyfleet.*": subject tokens cannot hold spaces, '*' or '>'`},
		},
		{
			name: "subject prefix with an empty token",
			yaml: "queue:\n  subject_prefix: keyfleet..items\n",
			want: []string{`config: FILE: line 2: queue.subject_prefix: "keyfleet..items" has an empty token (a leading, trailing or doubled '.')`},
		},
		{
			name: "subject prefix in the reserved space",
			yaml: "queue:\n  subject_prefix: $JS.items\n",
			want: []string{`config: FILE: line 2: queue.subject_prefix: "$JS.items": subjects starting with '$' are reserved for NATS`},
		},
		{
			name: "max_deliver below max_attempts",
			yaml: "queue:\n  max_deliver: 3\n",
			want: []string{`config: FILE: line 2: queue.max_deliver: must be -1 (unlimited) or at least worker.max_attempts (5), got 3`},
		},
		{
			name: "redelivery backoff",
			yaml: "queue:\n  ack_wait: 30s\n  max_deliver: 5\n  redelivery_backoff: [10s, 1m, 1m, 1m, 1m, 1m]\n",
			want: []string{
				`config: FILE: line 4: queue.redelivery_backoff[0]: must equal queue.ack_wait (30s): JetStream uses it as the ack wait; got 10s`,
				`config: FILE: line 4: queue.redelivery_backoff: lists 6 waits, more than queue.max_deliver (5) allows`,
			},
		},
		{
			name: "replicas and windows",
			yaml: "queue:\n  replicas: 7\n  ack_wait: 0s\n  duplicate_window: 0s\n  results_max_age: 0s\n",
			want: []string{
				`config: FILE: line 3: queue.ack_wait: must be at least 1s, got 0s`,
				`config: FILE: line 4: queue.duplicate_window: must be at least 100ms, got 0s`,
				`config: FILE: line 2: queue.replicas: must be from 1 to 5, got 7`,
				`config: FILE: line 5: queue.results_max_age: must be more than 0, got 0s`,
			},
		},
		{
			name: "http format without {secret}",
			yaml: "jobs:\n  http: {url: 'https://api.example.com/v1/x', format: 'Bearer {token}'}\n",
			want: []string{`config: FILE: line 2: jobs.http.format: must contain {secret}, where the credential's secret goes (e.g. "Bearer {secret}")`},
		},
		{
			name: "http url, method, header",
			yaml: "jobs:\n  http: {url: 'ftp://files.example.com/x', method: 'PO ST', header: 'X Key'}\n",
			want: []string{
				`config: FILE: line 2: jobs.http.url: scheme "ftp" is not http or https`,
				`config: FILE: line 2: jobs.http.method: "PO ST" is not an HTTP method`,
				`config: FILE: line 2: jobs.http.header: "X Key" is not a header name`,
			},
		},
		{
			name: "http without url",
			yaml: "jobs:\n  http: {header: X-Api-Key, format: '{secret}'}\n",
			want: []string{`config: FILE: line 2: jobs.http.url: must be set, e.g. https://api.example.com/v1/x`},
		},
		{
			name: "http header clashes with the secret's header",
			yaml: "jobs:\n  http:\n    url: https://api.example.com/v1/x\n    headers: {authorization: x, Content-Type: application/json}\n",
			want: []string{`config: FILE: line 4: jobs.http.headers.authorization: clashes with jobs.http.header (Authorization), which carries the secret`},
		},
		{
			name: "exec without command",
			yaml: "jobs:\n  exec: {timeout: 1m}\n",
			want: []string{`config: FILE: line 2: jobs.exec.command: must name the program to run, e.g. ["./process.sh"]`},
		},
		{
			name: "exec with an empty command list and a bad timeout",
			yaml: "jobs:\n  exec: {command: [], timeout: 0s}\n",
			want: []string{
				`config: FILE: line 2: jobs.exec.command: must name the program to run, e.g. ["./process.sh"]`,
				`config: FILE: line 2: jobs.exec.timeout: must be more than 0, got 0s`,
			},
		},
		{
			name: "exec env",
			yaml: "jobs:\n  exec:\n    command: [x]\n    env: {KEYFLEET_ATTEMPT: '9', 1BAD: x, GOOD: y}\n",
			want: []string{
				`config: FILE: line 4: jobs.exec.env.1BAD: is not an environment variable name (letters, digits and '_', not starting with a digit)`,
				`config: FILE: line 4: jobs.exec.env.KEYFLEET_ATTEMPT: is set by the worker for every run; it cannot be set here`,
			},
		},
		{
			name: "exec env KEYFLEET_KIND",
			yaml: "jobs:\n  exec:\n    command: [x]\n    env: {KEYFLEET_KIND: x}\n",
			want: []string{`config: FILE: line 4: jobs.exec.env.KEYFLEET_KIND: is set by the worker for every run; it cannot be set here`},
		},
		{
			name: "exec env KEYFLEET_KIND, block style",
			yaml: "jobs:\n  exec:\n    command: [x]\n    env:\n      LANG: C\n      KEYFLEET_KIND: x\n",
			want: []string{`config: FILE: line 6: jobs.exec.env.KEYFLEET_KIND: is set by the worker for every run; it cannot be set here`},
		},
		{
			name: "http headers the worker sets",
			yaml: "jobs:\n  http:\n    url: https://api.example.com/v1/x\n    headers: {X-Keyfleet-Item: x, Host: h}\n",
			want: []string{
				`config: FILE: line 4: jobs.http.headers.Host: is set by the worker on every request; it cannot be set here`,
				`config: FILE: line 4: jobs.http.headers.X-Keyfleet-Item: is set by the worker on every request; it cannot be set here`,
			},
		},
		{
			name: "nats url schemes",
			yaml: "nats:\n  url: 'nats://a:4222,http://b:4222'\n",
			want: []string{`config: FILE: line 2: nats.url: scheme "http" is not one of nats, tls, ws, wss`},
		},
		{
			name: "nats url without scheme",
			yaml: "nats:\n  url: localhost:4222\n",
			want: []string{`config: FILE: line 2: nats.url: "localhost:4222" has no scheme; want nats://host:4222 (schemes: nats, tls, ws, wss)`},
		},
		{
			name: "nats tls half set",
			yaml: "nats:\n  tls: {cert_file: /etc/kf/client.pem}\n",
			want: []string{`config: FILE: line 2: nats.tls.key_file: must be set when cert_file is`},
		},
		{
			name: "redis url scheme",
			yaml: "redis:\n  url: http://r:6379\n",
			want: []string{`config: FILE: line 2: redis.url: scheme "http" is not one of redis, rediss, unix`},
		},
		{
			name: "redis url bad database",
			yaml: "redis:\n  url: redis://r:6379/zero\n",
			want: []string{`config: FILE: line 2: redis.url: path "/zero" is not a database number`},
		},
		{
			name: "redis url bad port",
			yaml: "redis:\n  url: redis://r:99999/0\n",
			want: []string{`config: FILE: line 2: redis.url: port "99999" is not a number from 1 to 65535 in "redis://r:99999/0"`},
		},
		{
			name: "redis several hosts without cluster",
			yaml: "redis:\n  url: redis://h1:7000,h2:7001\n",
			want: []string{`config: FILE: line 2: redis.url: lists 2 hosts; set redis.cluster: true for Redis Cluster`},
		},
		{
			name: "redis cluster with a database",
			yaml: "redis:\n  url: redis://h1:7000,h2:7001/3\n  cluster: true\n",
			want: []string{`config: FILE: line 2: redis.url: Redis Cluster has only database 0, got 3`},
		},
		{
			name: "redis tls without rediss",
			yaml: "redis:\n  url: redis://r:6379/0\n  tls: {ca_file: /etc/kf/ca.pem}\n",
			want: []string{`config: FILE: line 3: redis.tls: is set, but redis.url uses redis://; use rediss:// for TLS`},
		},
		{
			name: "redis unix socket without a path",
			yaml: "redis:\n  url: 'unix://'\n",
			want: []string{`config: FILE: line 2: redis.url: "unix://" names no socket path; want unix:///path/to/redis.sock`},
		},
		{
			name: "every validation problem at once",
			yaml: "pool:\n  lease_ttl: 0s\nworker:\n  concurrency: 0\nqueue:\n  storage: tape\n",
			want: []string{
				`config: FILE: line 2: pool.lease_ttl: must be at least 1s, got 0s`,
				`config: FILE: line 4: worker.concurrency: must be at least 1, got 0`,
				`config: FILE: line 6: queue.storage: must be file or memory, got "tape"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "kf.yaml", tt.yaml)
			c, err := config.Load(path, env(nil))
			if err == nil {
				t.Fatalf("want an error, got none; config %+v", c)
			}
			if c != nil {
				t.Errorf("want a nil Config with the error, got %+v", c)
			}
			want := strings.ReplaceAll(strings.Join(tt.want, "\n"), "FILE", path)
			if got := err.Error(); got != want {
				t.Fatalf("error mismatch\nwant:\n%s\ngot:\n%s", want, got)
			}
		})
	}
}

// Every line of every error names the file.
func TestErrorLinesNameTheFile(t *testing.T) {
	path := writeFile(t, "kf.yaml", "worker: {concurrency: 0, max_attempts: 0}\nlog: {level: loud}\n")
	_, err := config.Load(path, env(nil))
	lines := errLines(err)
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d: %v", len(lines), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "config: "+path+": ") {
			t.Errorf("line does not start with %q: %q", "config: "+path+": ", l)
		}
	}
}

// A validation problem names the line of the key, wherever the value came
// from in the file (a merge); a value from the environment or from flags
// has no line in the file.
func TestValidationLines(t *testing.T) {
	path := writeFile(t, "kf.yaml", "nats: {url: nats://n:4222}\n"+
		"pool:\n"+
		"  credentials:\n"+
		"    - &k {id: a, secret_env: A, max_concurrent: 0}\n"+
		"    - <<: *k\n"+
		"      id: b\n"+
		"    - <<: *k\n"+
		"      id: c\n"+
		"      max_concurrent: -1\n")
	_, err := config.Load(path, env(map[string]string{"KEYFLEET_NATS_URL": "http://n:4222"}))
	want := []string{
		"config: " + path + `: nats.url (from KEYFLEET_NATS_URL): scheme "http" is not one of nats, tls, ws, wss`,
		"config: " + path + ": line 4: pool.credentials[0].max_concurrent: must be at least 1, got 0",
		"config: " + path + ": line 4: pool.credentials[1].max_concurrent: must be at least 1, got 0",
		"config: " + path + ": line 9: pool.credentials[2].max_concurrent: must be at least 1, got -1",
	}
	if got := errLines(err); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("want\n%s\ngot\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}
