package jsonl

import "slices"

// Index returns the place of key in the set: a number below Len(), the
// same for every call, so that a caller keeps a state per ID in an array
// of Len() entries (a byte an ID) instead of a map (30 bytes and more).
// ok is false when key is not in the set (as Has). IDs whose first hashes
// are equal share a place: Shared says which keys those are, and a caller
// keeps their states apart (by Key).
func (s *IDs) Index(k Key) (i int, ok bool) {
	s.seal()
	base := 0
	for _, c := range s.chunks {
		if j, found := slices.BinarySearch(c, k[0]); found {
			return base + j, true
		}
		base += len(c)
	}
	return 0, false
}

// Shared reports whether key's first hash is held by more than one ID of
// the set (see Index): never in practice, unless an ID was added twice.
func (s *IDs) Shared(k Key) bool {
	s.seal()
	return len(s.suspects) > 0 && s.suspect(k[0])
}
