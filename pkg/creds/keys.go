package creds

// keys names the Redis keys and channels the Go side refers to. All of a
// pool's keys share the prefix "<base>:{<pool>}:", whose hash tag keeps a
// pool in one Redis Cluster slot; the scripts derive the others from the
// prefix (see lua/lib.lua, which lists every key).
type keys struct {
	prefix string
	creds  string // sorted set: every credential, LRU order (KEYS[1] of every script)
}

func newKeys(base, pool string) keys {
	p := base + ":{" + pool + "}:"
	return keys{prefix: p, creds: p + "creds"}
}

// channel is the pub/sub channel of one pool handle: grants and timer
// duties for it.
func (k keys) channel(instance string) string { return k.prefix + "g:" + instance }

// probe is the fleet-wide claim on probing credential id (ClaimProbe): a
// string that lapses after the probe interval.
func (k keys) probe(id string) string { return k.prefix + "probe:" + id }
