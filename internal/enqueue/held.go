package enqueue

import (
	"cmp"
	"context"
	"hash/fnv"
	"slices"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
	"github.com/keyfleet/keyfleet/internal/queue"
)

// heldSet is the items a batch already holds (queue.HeldItems), as sorted
// 128-bit hashes of their IDs: 16 bytes an item, and no two IDs of a
// batch share a hash in practice (the chance is below 1e-20 for ten
// million items).
type heldSet [][2]uint64

func heldKey(id string) [2]uint64 {
	h := fnv.New128a()
	_, _ = h.Write([]byte(id))
	var sum [16]byte
	h.Sum(sum[:0])
	var k [2]uint64
	for i := range 8 {
		k[0] = k[0]<<8 | uint64(sum[i])
		k[1] = k[1]<<8 | uint64(sum[8+i])
	}
	return k
}

func compareKeys(a, b [2]uint64) int {
	return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
}

// has reports whether the batch holds the item id.
func (s heldSet) has(id string) bool {
	_, ok := slices.BinarySearchFunc(s, heldKey(id), compareKeys)
	return ok
}

// needsHeld reports whether an enqueue into the batch of record rec must
// ask what the batch holds: JetStream's duplicate window (window) no
// longer covers every message the batch was given. The batch's first
// enqueue is older than half the window: the rest leaves room for this
// enqueue's own publishing.
func needsHeld(rec kftype.BatchInfo, window time.Duration, now time.Time) bool {
	return rec.ID != "" && now.Sub(rec.EnqueuedAt) >= window/2
}

// readHeld reads what the batch holds into a heldSet.
func readHeld(ctx context.Context, q *queue.Queue, batch string) (heldSet, error) {
	var s heldSet
	err := q.HeldItems(ctx, batch, func(id string) error {
		s = append(s, heldKey(id))
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(s, compareKeys)
	return slices.Compact(s), nil
}
