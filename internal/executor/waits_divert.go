package executor

// A class whose items move to a fallback kind's keys (fallback.go) waits
// for that kind's class: while the class it moves to is full, it is full
// too, so that the puller passes its lanes over instead of pulling items
// that would only try the fallback's keys and go back
// (docs/waiting-model.md, "Fallbacks").

// divert records that items of class from move to class to.
func (c *ClassWaits) divert(from, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.diverted[from] = to
}

// undivert records that items of class from run on their own keys again;
// it reports whether they had moved (so that the puller may look at its
// lanes again).
func (c *ClassWaits) undivert(from string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	to, ok := c.diverted[from]
	if !ok {
		return false
	}
	delete(c.diverted, from)
	return c.isFull(to)
}
