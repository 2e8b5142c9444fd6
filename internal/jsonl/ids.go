package jsonl

import (
	"hash/maphash"
	"slices"
)

// Key identifies an ID in an IDs set: its two 64-bit hashes. Two different
// IDs share a key with a probability of about n²/2¹²⁹ for n IDs: never,
// in practice.
type Key [2]uint64

// IDs is the set of item IDs of one input, kept in 8 bytes an ID: the
// first 64-bit hash of each (seeded at random per set), in chunks that are
// sorted once the input is read. Equal hashes are only suspects: whether
// they are the same ID is decided exactly by Reader.Duplicates, which reads
// the input again for the suspect IDs alone. Not safe for concurrent use.
type IDs struct {
	s1, s2 maphash.Seed
	// hash is the first hash (a test seam forces collisions with it).
	hash   func(string) uint64
	chunks [][]uint64
	n      int
	sealed bool
	// suspects: the hashes held more than once, sorted, after seal.
	suspects []uint64
}

// Chunk sizes: the first chunk holds firstChunk hashes, each next one
// twice as many up to maxChunk. A chunk is filled in order, so pages not
// reached yet are never touched (the memory is 8 bytes an ID, not more),
// and no chunk is ever copied to grow.
const (
	firstChunk = 1 << 12
	maxChunk   = 1 << 20
)

// NewIDs returns an empty set.
func NewIDs() *IDs {
	s := &IDs{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
	s.hash = func(id string) uint64 { return maphash.String(s.s1, id) }
	return s
}

// Key returns the key of id in this set.
func (s *IDs) Key(id string) Key {
	return Key{s.hash(id), maphash.String(s.s2, id)}
}

// add records one more ID (duplicates are found later, by seal and
// Reader.Duplicates).
func (s *IDs) add(id string) {
	if s.sealed {
		panic("jsonl: IDs.add after the set was read")
	}
	last := len(s.chunks) - 1
	if last < 0 || len(s.chunks[last]) == cap(s.chunks[last]) {
		size := firstChunk
		if last >= 0 {
			size = min(2*cap(s.chunks[last]), maxChunk)
		}
		s.chunks = append(s.chunks, make([]uint64, 0, size))
		last++
	}
	s.chunks[last] = append(s.chunks[last], s.hash(id))
	s.n++
}

// seal sorts the chunks and finds the suspects, once: the hashes that
// occur more than once across all chunks (a merge of the sorted chunks).
func (s *IDs) seal() {
	if s.sealed {
		return
	}
	s.sealed = true
	for _, c := range s.chunks {
		slices.Sort(c)
	}
	m := newMerger(s.chunks)
	var prev uint64
	first := true
	for {
		h, ok := m.next()
		if !ok {
			return
		}
		if !first && h == prev {
			if n := len(s.suspects); n == 0 || s.suspects[n-1] != h {
				s.suspects = append(s.suspects, h)
			}
		}
		prev, first = h, false
	}
}

// suspect reports whether h is held more than once.
func (s *IDs) suspect(h uint64) bool {
	_, ok := slices.BinarySearch(s.suspects, h)
	return ok
}

// Suspects is the number of distinct hashes held more than once: 0 means
// every ID is distinct, and Reader.Duplicates has nothing to read.
func (s *IDs) Suspects() int {
	s.seal()
	return len(s.suspects)
}

// Has reports whether key is in the set. It compares the first hash only:
// an ID outside the set is taken for one inside with a probability of
// about n/2⁶⁴.
func (s *IDs) Has(k Key) bool {
	s.seal()
	for _, c := range s.chunks {
		if _, ok := slices.BinarySearch(c, k[0]); ok {
			return true
		}
	}
	return false
}

// Len is the number of IDs added (valid items read), duplicates included.
func (s *IDs) Len() int { return s.n }

// merger walks sorted chunks in order (a k-way merge over a small heap).
type merger struct {
	heads [][]uint64 // the rest of each chunk not yet taken, a min-heap by first value
}

func newMerger(chunks [][]uint64) *merger {
	m := &merger{}
	for _, c := range chunks {
		if len(c) > 0 {
			m.heads = append(m.heads, c)
		}
	}
	for i := len(m.heads)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m
}

func (m *merger) next() (uint64, bool) {
	if len(m.heads) == 0 {
		return 0, false
	}
	v := m.heads[0][0]
	if m.heads[0] = m.heads[0][1:]; len(m.heads[0]) == 0 {
		last := len(m.heads) - 1
		m.heads[0] = m.heads[last]
		m.heads = m.heads[:last]
	}
	m.down(0)
	return v, true
}

func (m *merger) down(i int) {
	h := m.heads
	for {
		small := i
		if l := 2*i + 1; l < len(h) && h[l][0] < h[small][0] {
			small = l
		}
		if r := 2*i + 2; r < len(h) && h[r][0] < h[small][0] {
			small = r
		}
		if small == i {
			return
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}
