package secret

// An Aho–Corasick automaton over every form of every secret, so that a
// text is scanned once, in time linear in its length, however many
// secrets there are.
//
// It is written here rather than taken from a library: the Go ones at
// hand either keep a dense 256-entry row of 8-byte state numbers for every
// state (2 KiB a state: about 1 GB for 1,000 keys in all their forms), or
// report every overlapping match one by one. This one keeps its states
// sparse (an edge costs 6 bytes; only states with many children get a
// dense row, indexed by byte class), and answers for each text position
// the one thing scrubbing needs: the longest form that ends there.

// A form is one text to find: a secret as it may appear in output.
type form struct {
	text   string
	base64 bool // a base64 core: a match is widened to the base64 run around it
}

// denseMin is the number of children from which a state gets a dense
// row instead of a list of edges to search.
const denseMin = 8

// matcher is the automaton. The root is state 0; its dense row is
// complete (a byte that starts no form leads back to the root), so the
// search never follows a failure link from it.
type matcher struct {
	class  [256]uint16 // byte → class; class 0: a byte that occurs in no form
	nclass int
	states []state
	edges  []uint64 // a sparse state's edges: the next state << 16 | the class
	table  []int32  // dense rows of nclass entries; -1: no edge
	maxLen int
}

// state is one state of the automaton, all in one place for the cache.
type state struct {
	fail    int32 // the state of the longest proper suffix that is also a trie prefix
	longest int32 // the length of the longest form ending in this state (0: none)
	b64     int32 // the same among base64 forms
	at      int32 // where its edges start in edges, or its row in table
	n       int32 // how many edges it has; -1: a dense row
}

// buildNode is a trie node while the automaton is built. Its children are
// a list, in flat arrays so that building allocates little: its first
// child, then each child's next sibling (0: none; the root is no child).
type buildNode struct {
	first, next int32
	c           uint16 // the class of the byte that leads here
	kids        int32  // how many children it has
	depth       int32
	form        bool // a form ends here
	b64         bool // ... and it is a base64 core
}

// child returns the child of node s by class c, or -1.
func child(nodes []buildNode, s int32, c uint16) int32 {
	for t := nodes[s].first; t != 0; t = nodes[t].next {
		if nodes[t].c == c {
			return t
		}
	}
	return -1
}

// newMatcher builds the automaton for forms (none may be empty).
func newMatcher(forms []form) *matcher {
	m := &matcher{}
	size := 1
	for _, f := range forms {
		size += len(f.text)
		for i := 0; i < len(f.text); i++ {
			if c := f.text[i]; m.class[c] == 0 {
				m.nclass++
				m.class[c] = uint16(m.nclass)
			}
		}
	}
	m.nclass++ // class 0

	// The trie. The root's children are also kept by class, for speed.
	nodes := make([]buildNode, 1, size)
	var rootRow [257]int32 // by class; 0: none (in the automaton: back to the root)
	for _, f := range forms {
		s := int32(0)
		for i := 0; i < len(f.text); i++ {
			c := m.class[f.text[i]]
			t := int32(-1)
			if s != 0 {
				t = child(nodes, s, c)
			} else if rootRow[c] != 0 {
				t = rootRow[c]
			}
			if t < 0 {
				t = int32(len(nodes))
				nodes = append(nodes, buildNode{next: nodes[s].first, c: c, depth: nodes[s].depth + 1})
				nodes[s].first = t
				nodes[s].kids++
				if s == 0 {
					rootRow[c] = t
				}
			}
			s = t
		}
		nodes[s].form = true
		nodes[s].b64 = nodes[s].b64 || f.base64
		m.maxLen = max(m.maxLen, len(f.text))
	}

	// Failure links and outputs, breadth first so that a state's failure
	// target (shallower) is complete before the state.
	n := len(nodes)
	m.states = make([]state, n)
	queue := make([]int32, 0, n)
	for t := nodes[0].first; t != 0; t = nodes[t].next {
		queue = append(queue, t) // fail = 0
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		st := &m.states[s]
		f := st.fail
		st.longest, st.b64 = m.states[f].longest, m.states[f].b64
		if nodes[s].form {
			st.longest = nodes[s].depth
			if nodes[s].b64 {
				st.b64 = nodes[s].depth
			}
		}
		for k := nodes[s].first; k != 0; k = nodes[k].next {
			c, g := nodes[k].c, f
			for {
				if g == 0 {
					g = rootRow[c]
					break
				}
				if t := child(nodes, g, c); t >= 0 {
					g = t
					break
				}
				g = m.states[g].fail
			}
			m.states[k].fail = g
			queue = append(queue, k)
		}
	}

	// Flatten the edges.
	for s := range nodes {
		st := &m.states[s]
		if s == 0 || nodes[s].kids >= denseMin {
			st.at, st.n = int32(len(m.table)), -1
			for range m.nclass {
				m.table = append(m.table, -1)
			}
			row := m.table[st.at:]
			if s == 0 {
				for c := range m.nclass {
					row[c] = 0
				}
			}
			for k := nodes[s].first; k != 0; k = nodes[k].next {
				row[nodes[k].c] = k
			}
		} else {
			st.at, st.n = int32(len(m.edges)), nodes[s].kids
			for k := nodes[s].first; k != 0; k = nodes[k].next {
				m.edges = append(m.edges, uint64(k)<<16|uint64(nodes[k].c))
			}
		}
	}
	return m
}

// step returns the state after reading byte b in state s.
func (m *matcher) step(s int32, b byte) int32 {
	c := m.class[b]
	if c == 0 {
		return 0 // no form holds this byte
	}
	for {
		st := &m.states[s]
		if st.n < 0 {
			if t := m.table[st.at+int32(c)]; t >= 0 {
				return t // the root's row is complete
			}
		} else {
			for _, e := range m.edges[st.at : st.at+st.n] {
				if uint16(e) == c {
					return int32(e >> 16)
				}
			}
		}
		s = st.fail
	}
}
