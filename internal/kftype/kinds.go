package kftype

import (
	"encoding/json"
	"slices"
	"strings"
)

// Kinds are the job kinds of a batch's items, sorted, each once. A batch
// record stores them as one string, comma separated (its "kind": a
// kind's name holds no comma).
type Kinds []string

// Add returns k with kind in its place ("" or a kind k holds: k).
func (k Kinds) Add(kind string) Kinds {
	i, found := slices.BinarySearch(k, kind)
	if kind == "" || found {
		return k
	}
	return slices.Insert(k, i, kind)
}

// String is the kinds comma separated, as a record stores them.
func (k Kinds) String() string { return strings.Join(k, ",") }

// MarshalJSON writes the kinds as one string, comma separated.
func (k Kinds) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// UnmarshalJSON reads the kinds from one string, comma separated.
func (k *Kinds) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*k = nil
	for kind := range strings.SplitSeq(s, ",") {
		*k = k.Add(kind)
	}
	return nil
}
