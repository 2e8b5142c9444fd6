package jsonl

// Without returns the object in obj (valid JSON) without its top-level
// member field (every occurrence), keeping every other byte as it is:
// the request a provider gets is the item's line without its ID, not a
// re-encoding of it. The comma that separated the member goes with it.
// obj is returned as it is when it has no such member.
func Without(obj []byte, field string) []byte {
	type span struct{ from, to int }
	var cut []span
	s := scanner{b: obj}
	s.space()
	if s.eof() || s.b[s.i] != '{' {
		return obj
	}
	s.i++
	prevEnd := s.i // where the previous member's value ended (or just after '{')
	first := true
	for {
		s.space()
		if s.eof() {
			return obj
		}
		switch s.b[s.i] {
		case '}':
			goto done
		case ',':
			s.i++
			continue
		case '"':
		default:
			return obj
		}
		kStart := s.i
		if !s.skipString() {
			return obj
		}
		key := s.b[kStart:s.i]
		s.space()
		if s.eof() || s.b[s.i] != ':' {
			return obj
		}
		s.i++
		s.space()
		vStart := s.i
		if !s.skipValue() || s.i == vStart {
			return obj
		}
		if keyIs(key, field) {
			if first {
				// The first member: it goes up to the comma after it (and
				// the blanks after that), or to the closing brace.
				end := s.i
				t := scanner{b: obj, i: end}
				t.space()
				if !t.eof() && t.b[t.i] == ',' {
					t.i++
					t.space()
					end = t.i
				}
				cut = append(cut, span{kStart, end})
				s.i = end
				prevEnd = end
				continue
			}
			// A later member: from the end of the one before (its comma
			// included) to the end of this one.
			cut = append(cut, span{prevEnd, s.i})
		}
		first = first && keyIs(key, field)
		prevEnd = s.i
	}
done:
	if len(cut) == 0 {
		return obj
	}
	out := make([]byte, 0, len(obj))
	at := 0
	for _, c := range cut {
		out = append(out, obj[at:c.from]...)
		at = c.to
	}
	return append(out, obj[at:]...)
}
