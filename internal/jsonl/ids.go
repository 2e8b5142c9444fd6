package jsonl

import "hash/maphash"

// Key is the 128-bit hash an IDs set keeps of an ID. Two different IDs
// share a key with a probability of about n²/2¹²⁹ for n IDs: never, in
// practice.
type Key [2]uint64

// IDs is a set of item IDs that holds a 128-bit hash of each, with the line
// it was first seen on: memory per ID is bounded whatever the ID's length.
// The hashes are seeded at random per set. Not safe for concurrent use.
type IDs struct {
	s1, s2 maphash.Seed
	m      map[Key]int
}

// NewIDs returns an empty set.
func NewIDs() *IDs {
	return &IDs{s1: maphash.MakeSeed(), s2: maphash.MakeSeed(), m: make(map[Key]int)}
}

// Key returns the key of id in this set.
func (s *IDs) Key(id string) Key {
	return Key{maphash.String(s.s1, id), maphash.String(s.s2, id)}
}

// add records id first seen on line; if it was already there it returns
// the first line and true.
func (s *IDs) add(id string, line int) (first int, dup bool) {
	k := s.Key(id)
	if first, ok := s.m[k]; ok {
		return first, true
	}
	s.m[k] = line
	return line, false
}

// Line returns the line id was first seen on.
func (s *IDs) Line(id string) (line int, ok bool) {
	line, ok = s.m[s.Key(id)]
	return line, ok
}

// Has reports whether key is in the set.
func (s *IDs) Has(k Key) bool {
	_, ok := s.m[k]
	return ok
}

// Len is the number of IDs in the set.
func (s *IDs) Len() int { return len(s.m) }
