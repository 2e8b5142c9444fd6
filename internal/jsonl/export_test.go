package jsonl

// WithHash makes the IDs set of a Reader built with o use h as its first
// hash: a test forces collisions of different IDs with it.
func WithHash(o Options, h func(string) uint64) Options {
	o.hash = h
	return o
}
