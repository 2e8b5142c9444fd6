package queue

// SetLaneFetched sets the hook a cancel's drain runs when it has fetched
// the last of a lane.
func SetLaneFetched(q *Queue, f func(lane string)) { q.laneFetched = f }
