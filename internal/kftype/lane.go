package kftype

import "strings"

// A lane is one batch's items of one scope (docs/waiting-model.md): they
// are pulled through a consumer of their own, and the lane schedule
// (internal/lanes) says which lane a worker pulls from next.

// laneSep separates a scoped lane's batch from its scope: a byte that
// neither a batch ID (queue.CheckID) nor a scope (creds.ValidScope) can
// hold.
const laneSep = '\x00'

// Lane is the lane of batch's items of scope: the batch ID itself for the
// items without a scope, else the batch ID, a NUL byte and the scope.
func Lane(batch, scope string) string {
	if scope == "" {
		return batch
	}
	return batch + string(laneSep) + scope
}

// LaneParts reverses Lane.
func LaneParts(lane string) (batch, scope string) {
	if i := strings.IndexByte(lane, laneSep); i >= 0 {
		return lane[:i], lane[i+1:]
	}
	return lane, ""
}

// Lanes are the batch's lanes: its items without a scope, then one per
// scope the record holds.
func (b BatchInfo) Lanes() []string {
	out := make([]string, 0, 1+len(b.Scopes))
	out = append(out, b.ID)
	for _, s := range b.Scopes {
		out = append(out, Lane(b.ID, s))
	}
	return out
}
