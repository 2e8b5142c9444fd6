package batchview

import (
	"cmp"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// Fallbacks counts a batch's items that ran on a fallback kind, each once
// by its latest result (a later result of the item replaces what an
// earlier one said). It keeps a hash and two bytes per such item, nothing
// for the others, and its counts as it goes (Counts costs the number of
// distinct moves, not of items); the zero value is ready.
type Fallbacks struct {
	moves []kftype.FallbackCount // the distinct (kind, to, why) seen, with their items
	index map[[3]string]uint16   // into moves
	items map[uint64]uint16      // an item's hash: its move's index
}

// Add counts the result r of the item whose ID hashes to item.
func (f *Fallbacks) Add(item uint64, r kftype.Result) {
	was, had := f.items[item]
	if r.FallbackFrom == "" {
		if had {
			f.moves[was].Items--
			delete(f.items, item)
		}
		return
	}
	k := [3]string{r.FallbackFrom, r.Kind, r.FallbackReason}
	i, ok := f.index[k]
	if !ok {
		if len(f.moves) == 1<<16-1 {
			return // more distinct moves than a batch of a few kinds can have
		}
		if f.index == nil {
			f.index, f.items = map[[3]string]uint16{}, map[uint64]uint16{}
		}
		i = uint16(len(f.moves))
		f.index[k] = i
		f.moves = append(f.moves, kftype.FallbackCount{Kind: k[0], To: k[1], Why: k[2]})
	}
	if had {
		f.moves[was].Items--
	}
	f.moves[i].Items++
	f.items[item] = i
}

// Counts are the items counted, by kind, fallback kind and why; [] when
// none.
func (f *Fallbacks) Counts() []kftype.FallbackCount {
	var nonzero []kftype.FallbackCount
	for _, m := range f.moves {
		if m.Items > 0 {
			nonzero = append(nonzero, m)
		}
	}
	return kftype.SumFallbacks(nonzero)
}

// OwnKind is the kind a result's item was enqueued as: the kind that ran
// it, or the one it moved from to a fallback kind.
func OwnKind(r kftype.Result) string { return cmp.Or(r.FallbackFrom, r.Kind) }
