package creds

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// KeySet is a set of credentials an acquire may be limited to
// (Request.Keys): the keys of one kind of work. One pool handle serves
// acquires of any number of key sets, so that a process running several
// kinds batches all their acquires into the same steps.
type KeySet struct {
	ids  []string // sorted, each once
	name string   // the group's name in Redis: a hash of ids
}

// NewKeySet returns the key set of the given credential IDs (at least
// one; each a ValidID).
func NewKeySet(ids ...string) (*KeySet, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: a key set needs at least one credential", ErrInvalid)
	}
	for _, id := range ids {
		if err := ValidID(id); err != nil {
			return nil, fmt.Errorf("%w: key set: id %s", ErrInvalid, err)
		}
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	return &KeySet{ids: sorted, name: groupName(sorted)}, nil
}

// Name is the key set's name: the same IDs always give the same name, a
// short run of hex digits.
func (k *KeySet) Name() string { return k.name }

// IDs are the key set's credential IDs, sorted.
func (k *KeySet) IDs() []string { return slices.Clone(k.ids) }

// groupName names the Redis group of sorted, distinct ids (a WithOnly
// handle's, a KeySet's): the same ids always give the same name.
func groupName(ids []string) string {
	h := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return hex.EncodeToString(h[:8])
}
