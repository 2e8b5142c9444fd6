package creds

// keys names every Redis key and channel of one pool. All of them share the
// prefix "<base>:{<pool>}:", whose hash tag keeps a pool in one Redis
// Cluster slot. The per-credential keys (cred:, cool:, leases:, rate:) are
// derived inside the scripts from the prefix; see lua/prelude.lua.
type keys struct {
	prefix string
	creds  string // sorted set: credential id -> last acquire (us), the LRU order
	fence  string // fencing-token counter
	wake   string // pub/sub channel: capacity may have been freed
}

func newKeys(base, pool string) keys {
	p := base + ":{" + pool + "}:"
	return keys{prefix: p, creds: p + "creds", fence: p + "fence", wake: p + "wake"}
}
