// Package lanes is the fleet's lane schedule: which batch a worker pulls
// from next. A lane is one batch's items of one scope (kftype.Lane: the
// batch ID for its items without a scope); the schedule gives free slots to
// the lanes by strict priority across levels 1..5 and by weighted fair
// share within a level (start-time fair queueing: among tenants by their
// weights first, then among each tenant's lanes by theirs), in one Lua
// script on Redis, shared by every worker. The operation that writes a
// batch's record registers its lanes (Sync, through internal/batchlanes);
// the workers pick from them. docs/waiting-model.md describes the model;
// this package is its Redis half. It does not log.
package lanes

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lanes.lua
var lanesLua string

var script = redis.NewScript(lanesLua)

// Schedule is a handle on one stream's lane schedule.
type Schedule struct {
	rdb   redis.Scripter
	epoch string // KEYS[1]
	turn  Turn
}

// Turn bounds how long the lane a pick chose keeps its level's picks,
// against lanes of its classes, while it has items: up to Time or Slots
// slots, whichever ends first.
// Its virtual time grows with every pick all the same, so the shares
// stay exact beyond a turn; what a turn buys is fewer lanes active at
// once, and each active JetStream consumer costs nats-server a state
// write every 100 ms however few items it delivers (docs/waiting-model.md).
// The zero Turn is none: every pick goes to the lowest virtual time.
type Turn struct {
	Time  time.Duration
	Slots int
}

// TurnDefault is the turn New gives a schedule: 50 ms is a small part of
// any share a person watches, and 1,024 slots ends a turn sooner on a
// fast fleet.
var TurnDefault = Turn{Time: 50 * time.Millisecond, Slots: 1024}

// New returns the schedule of the work stream named stream, with
// TurnDefault. Its keys share one hash tag, so the schedule lives in one
// Redis Cluster slot.
func New(rdb redis.Scripter, stream string) *Schedule {
	return &Schedule{rdb: rdb, epoch: Prefix(stream) + "epoch", turn: TurnDefault}
}

// WithTurn returns the schedule with turn instead of TurnDefault (the
// zero Turn: none).
func (s *Schedule) WithTurn(turn Turn) *Schedule {
	c := *s
	c.turn = turn
	return &c
}

// Prefix is the prefix of every key of a stream's schedule.
func Prefix(stream string) string { return "keyfleet:{" + stream + ".lanes}:" }

// States of a lane (the batch's), as Sync takes them.
const (
	Running   = "running"
	Paused    = "paused"
	Cancelled = "cancelled"
)

// Lane is what Sync needs of a batch.
type Lane struct {
	ID       string
	State    string // Running, Paused, Cancelled
	Priority int    // 1..5
	Weight   int    // >= 1
	// Gen orders the calls: the batch record's revision. A Sync with a
	// lower Gen than the last one changes nothing.
	Gen uint64
	// Classes are what the lane's items wait for (the worker's names:
	// a key set and a scope), each without white space; a pick passes
	// over a lane whose every class it is given. None: never passed over.
	Classes []string
	// Tenant is the batch's tenant ("" none) and TenantWeight its weight
	// (>= 1): tenants share a level by their weights before their lanes
	// do (a lane counts with its share of its tenant's).
	Tenant       string
	TenantWeight int
}

// EveryKey is the key-set part of a class whose items may use every key.
const EveryKey = "*"

// Class names what the items of a key set (its name, creds.KeySet.Name;
// EveryKey: every key) and a scope wait for: the names Lane.Classes and
// Pick's exclude hold. It holds no white space when keySet and scope hold
// none (a key set's name is hex; a scope has none: creds.ValidScope).
func Class(keySet, scope string) string { return keySet + "|" + scope }

// Synced says what Sync did.
type Synced int

// What Sync did.
const (
	// Stale: a newer state of the lane was in already.
	Stale Synced = iota
	// Done: the lane is in the schedule (running) or out of it.
	Done
	// Drained: the lane was found empty at this generation; it stays out
	// until a higher generation (items added) registers it.
	Drained
)

// Sync registers a running lane (at its level's virtual time, so that it
// neither gets credit for the time it was not there nor waits behind the
// credit of others) or takes a paused or cancelled one out.
func (s *Schedule) Sync(ctx context.Context, l Lane) (Synced, error) {
	if l.Priority < 1 || l.Priority > 5 || l.Weight < 1 {
		return Stale, fmt.Errorf("lanes: lane %q: priority %d, weight %d out of range", l.ID, l.Priority, l.Weight)
	}
	for _, c := range l.Classes {
		if c == "" || strings.ContainsAny(c, " \t\n\v\f\r") {
			return Stale, fmt.Errorf("lanes: lane %q: class %q is empty or holds white space", l.ID, c)
		}
	}
	n, err := script.Run(ctx, s.rdb, []string{s.epoch}, "sync", l.ID, l.State, l.Priority, l.Weight, l.Gen,
		strings.Join(l.Classes, " "), l.Tenant, max(l.TenantWeight, 1)).Int()
	if err != nil {
		return Stale, fmt.Errorf("lanes: sync %q: %w", l.ID, err)
	}
	return Synced(n), nil
}

// ErrLost is Pick's answer when the schedule is not known to hold every
// lane (Redis lost its state, or it is new): the caller registers the
// lanes of every batch record again (Sync), says so (Complete), then picks
// again. A Sync alone does not make the schedule complete: after a loss,
// the first writer's lanes are not all there is.
var ErrLost = errors.New("lanes: the schedule is lost (Redis lost its state): register the lanes again")

// Complete says the schedule holds every lane: the caller registered the
// lanes of every batch record it knows since Pick said ErrLost.
func (s *Schedule) Complete(ctx context.Context) error {
	if err := script.Run(ctx, s.rdb, []string{s.epoch}, "complete").Err(); err != nil {
		return fmt.Errorf("lanes: complete: %w", err)
	}
	return nil
}

// Pick gives n free slots to the next lane: the lane whose virtual time is
// lowest among the highest priority's lanes that are not resting after a
// short fetch, or instead the lane of its classes whose turn it is (Turn).
// A lane whose every class is in exclude is passed over for this pick
// (the caller cannot take its items now: it has its share of slots
// waiting for those keys already): it keeps its place and is not reported
// as resting. It
// returns the lane and its share (n), or no lane and how long until a
// resting lane may be picked (-1: none is registered, or every lane is
// passed over).
func (s *Schedule) Pick(ctx context.Context, n int, exclude ...string) (lane string, share int, wait time.Duration, err error) {
	args := make([]any, 0, 4+len(exclude))
	args = append(args, "pick", n, s.turn.Time.Microseconds(), s.turn.Slots)
	for _, c := range exclude {
		args = append(args, c)
	}
	reply, err := script.Run(ctx, s.rdb, []string{s.epoch}, args...).StringSlice()
	if err != nil {
		return "", 0, 0, fmt.Errorf("lanes: pick: %w", err)
	}
	if len(reply) != 2 {
		return "", 0, 0, fmt.Errorf("lanes: pick: unexpected reply %q", reply)
	}
	v, err := strconv.ParseInt(reply[1], 10, 64)
	if err != nil {
		return "", 0, 0, fmt.Errorf("lanes: pick: %w", err)
	}
	switch {
	case reply[0] != "":
		return reply[0], int(v), 0, nil
	case v == -2:
		return "", 0, 0, ErrLost
	case v < 0:
		return "", 0, -1, nil
	}
	return "", 0, time.Duration(v) * time.Microsecond, nil
}

// Got reports a fetch from lane that took got of the asked messages: when
// fewer, the unused share is given back and the lane rests a little
// (50 ms, doubling to 1 s while it stays empty); a full fetch ends the
// rest.
func (s *Schedule) Got(ctx context.Context, lane string, asked, got int) error {
	if err := script.Run(ctx, s.rdb, []string{s.epoch}, "got", lane, asked, got).Err(); err != nil {
		return fmt.Errorf("lanes: got %q: %w", lane, err)
	}
	return nil
}

// Drained takes a lane out that holds nothing any more (nothing pending,
// nothing unacknowledged) as of generation gen; it reports false when the
// lane was registered again since (items came).
func (s *Schedule) Drained(ctx context.Context, lane string, gen uint64) (bool, error) {
	n, err := script.Run(ctx, s.rdb, []string{s.epoch}, "drained", lane, gen).Int()
	if err != nil {
		return false, fmt.Errorf("lanes: drained %q: %w", lane, err)
	}
	return n == 1, nil
}

// maxGens bounds the lanes one call of Gens asks about (its script's
// arguments).
const maxGens = 512

// Gens returns the generation each of lanes is registered at (0: none,
// or Redis lost the schedule), in their order.
func (s *Schedule) Gens(ctx context.Context, lanes []string) ([]uint64, error) {
	out := make([]uint64, 0, len(lanes))
	for len(lanes) > 0 {
		chunk := lanes[:min(len(lanes), maxGens)]
		lanes = lanes[len(chunk):]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, "gens")
		for _, l := range chunk {
			args = append(args, l)
		}
		reply, err := script.Run(ctx, s.rdb, []string{s.epoch}, args...).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("lanes: gens: %w", err)
		}
		if len(reply) != len(chunk) {
			return nil, fmt.Errorf("lanes: gens: %d answers for %d lanes", len(reply), len(chunk))
		}
		for i, v := range reply {
			g, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("lanes: gens: lane %q: %w", chunk[i], err)
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// Claim makes owner the one that does what (sweeping a cancelled batch,
// say) for ttl: it reports false while another owner's claim lives.
func (s *Schedule) Claim(ctx context.Context, what, owner string, ttl time.Duration) (bool, error) {
	n, err := script.Run(ctx, s.rdb, []string{s.epoch}, "claim", what, owner, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("lanes: claim %q: %w", what, err)
	}
	return n == 1, nil
}
