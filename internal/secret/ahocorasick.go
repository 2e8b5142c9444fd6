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

// buildNode is a trie node while the automaton is built.
type buildNode struct {
	kids  []buildEdge
	depth int32
	form  bool // a form ends here
	b64   bool // ... and it is a base64 core
}

type buildEdge struct {
	c  uint16 // byte class
	to int32
}

func (n *buildNode) child(c uint16) int32 {
	for _, e := range n.kids {
		if e.c == c {
			return e.to
		}
	}
	return -1
}

// newMatcher builds the automaton for forms (none may be empty).
func newMatcher(forms []form) *matcher {
	m := &matcher{}
	for _, f := range forms {
		for i := 0; i < len(f.text); i++ {
			if c := f.text[i]; m.class[c] == 0 {
				m.nclass++
				m.class[c] = uint16(m.nclass)
			}
		}
	}
	m.nclass++ // class 0

	// The trie.
	nodes := []buildNode{{}}
	for _, f := range forms {
		s := int32(0)
		for i := 0; i < len(f.text); i++ {
			c := m.class[f.text[i]]
			t := nodes[s].child(c)
			if t < 0 {
				t = int32(len(nodes))
				nodes = append(nodes, buildNode{depth: nodes[s].depth + 1})
				nodes[s].kids = append(nodes[s].kids, buildEdge{c: c, to: t})
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
	var rootRow [257]int32 // by class; 0: back to the root
	for _, e := range nodes[0].kids {
		rootRow[e.c] = e.to
	}
	queue := make([]int32, 0, n)
	for _, e := range nodes[0].kids {
		queue = append(queue, e.to) // fail = 0
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
		for _, e := range nodes[s].kids {
			g := f
			for {
				if g == 0 {
					g = rootRow[e.c]
					break
				}
				if t := nodes[g].child(e.c); t >= 0 {
					g = t
					break
				}
				g = m.states[g].fail
			}
			m.states[e.to].fail = g
			queue = append(queue, e.to)
		}
	}

	// Flatten the edges.
	for s := range nodes {
		st := &m.states[s]
		kids := nodes[s].kids
		if s == 0 || len(kids) >= denseMin {
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
			for _, e := range kids {
				row[e.c] = e.to
			}
		} else {
			st.at, st.n = int32(len(m.edges)), int32(len(kids))
			for _, e := range kids {
				m.edges = append(m.edges, uint64(e.to)<<16|uint64(e.c))
			}
		}
		nodes[s].kids = nil // let the trie go as we copy it out
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
