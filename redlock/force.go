package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Force release: an operator's override that frees a key whoever holds it. All of its
// bookkeeping lives here: the client's own holder is marked lost first, and no local
// handoff of the key happens while a force release is under way or since one began after
// a lock was ended (queues.forcing, forced; handoff.go and acquire.go ask forceNow and
// forcedSince).

// Force release and the client's own locks: the arguments
//
// A lock a force release ends while provisional never got the turn: its Acquire keeps it
// and contends again (the turn is spent once, whatever order a release, a force release
// and a handoff run in: state.go; TestForceReleaseLeavesTheTurnWithTheAcquire,
// TestForceReleaseOfAHandedLockLeavesTheTurnWithItsWaiter).
//
// A force release of the key by the same client never misses a joiner (a reader that
// shares the entry of a reader of its client: readgroup.go): the join checks for force
// releases and registers the joiner in one step under queues.mu, where a force release
// numbers itself before it lists the holders it marks lost, so the joiner is either
// refused (it goes to Redis, after the deletes) or listed and marked lost
// (joinReader; TestJoiningReaderCannotEscapeAForceRelease).
//
// A force release of a limited key deletes every place (limit.go).

// ForceResult is what a ForceRelease did.
type ForceResult struct {
	Key   string
	Nodes []ForceNode // per node, in the order of New's URLs
	// Deleted counts the nodes that had something of the key (the lock, a place, readers,
	// a writer's mark); Answered those that confirmed, with or without it.
	Deleted, Answered int
	// Stopped are this client's locks of the key that were marked lost (LostForceReleased)
	// and released: their holders' contexts are cancelled.
	Stopped []LockInfo
}

// ForceNode is one node's part in a ForceRelease.
type ForceNode struct {
	Node    string // address, never with a password
	Deleted bool   // the node had something of the key
	Err     error  // the node did not confirm
}

// ForceRelease deletes key on every node whoever holds it (an operator override) and
// marks the locks this client holds on it as lost, so their holders stop. The error is
// non-nil when a node did not confirm (the result says which); the rest is done anyway.
func (c *Client) ForceRelease(ctx context.Context, key string) (ForceResult, error) {
	res := ForceResult{Key: key}
	if err := validateKey(key); err != nil {
		return res, err
	}
	// No local handoff of this key while it is being forced: a lock handed on now would
	// hold keys about to be deleted. The holder (a handoff done before is registered by
	// then) is marked lost first. A waiter that then takes the key anew in Redis is not
	// touched: its SETs came after our deletes or are deleted by them (the narrow race
	// any operator override has; fencing guards it).
	c.queues.beginForce(key)
	defer c.queues.endForce(key)
	held := c.holders(key)
	for _, l := range held {
		l.markLost(LostForceReleased)
	}
	nm := c.names(key)
	forceKeys := []string{nm.lock, nm.writer, nm.readers, nm.turn}
	for _, s := range c.slotNames(key, MaxLimit) {
		forceKeys = append(forceKeys, s.lock)
	}
	ctx = context.WithoutCancel(ctx)
	res.Nodes = make([]ForceNode, len(c.nodes))
	res.Deleted, _, _ = c.onAll(ctx, "force_release", 0, func(cctx context.Context, i int, nd *node) (bool, error) {
		n, err := forceReleaseScript.Run(cctx, nd.tr, forceKeys, nm.channel).Int64()
		res.Nodes[i] = ForceNode{Node: nd.addr, Deleted: n > 0, Err: err}
		return n > 0, err
	})
	var errs []error
	for _, n := range res.Nodes {
		if n.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Node, n.Err))
		} else {
			res.Answered++
		}
	}
	// Release the holders marked lost: their renewals stop at once, and compare-and-delete
	// removes what a renewal in flight may have written back (else a holder draining its
	// lock would keep renewing the key). Their own Release then finds them released.
	for _, l := range held {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrReleased) {
			errs = append(errs, err)
		}
		res.Stopped = append(res.Stopped, l.Info())
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("redlock: force release %q: %d node(s) failed: %w", key, len(res.Nodes)-res.Answered, errors.Join(errs...))
	}
	return res, nil
}

// forceBook is the force releases' bookkeeping, kept in queues (under queues.mu) because
// a handoff checks it in the same step as it hands the turn on (turn.handTo).
type forceBook struct {
	// forcing counts the force releases under way per key: no handoff meanwhile.
	forcing map[string]int
	// forceSeq numbers force releases; forced remembers, per key, the latest one for
	// forcedMemory, so that an acquire round can tell whether a force on its key began
	// since the round did (forcedSince).
	// Both atomics are written under queues.mu, and read without it on the hot path
	// (every acquire round and release asks): forcingN counts force releases under way.
	forceSeq, forcingN atomic.Uint64
	forced             map[string]forceMark
}

type forceMark struct {
	seq uint64
	at  time.Time
}

// forcedMemory is how long a force release is remembered for forcedSince: far longer
// than an acquire round (a node timeout, or two with fencing).
const forcedMemory = time.Minute

// beginForce and endForce bracket a force release of key (see Client.ForceRelease).
func (qs *queues) beginForce(key string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.forcing[key]++
	qs.forcingN.Add(1)
	seq := qs.forceSeq.Add(1)
	now := time.Now()
	for k, m := range qs.forced {
		if now.Sub(m.at) > forcedMemory {
			delete(qs.forced, k)
		}
	}
	qs.forced[key] = forceMark{seq: seq, at: now}
}

// forceNow returns the force sequence number now, for forcedSince. A force release of
// key under way counts as one that begins later: its deletes may still come.
func (qs *queues) forceNow(key string) uint64 {
	if qs.forcingN.Load() == 0 {
		return qs.forceSeq.Load() // a force beginning now gets a larger number
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.forcing[key] > 0 {
		return qs.forced[key].seq - 1
	}
	return qs.forceSeq.Load()
}

// forcedSince reports whether a force release of key began after seq (forceNow).
func (qs *queues) forcedSince(key string, seq uint64) bool {
	if qs.forceSeq.Load() <= seq {
		return false // no force release of any key began since
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.forcedSinceLocked(key, seq)
}

func (qs *queues) forcedSinceLocked(key string, seq uint64) bool {
	m, ok := qs.forced[key]
	return ok && m.seq > seq
}

func (qs *queues) endForce(key string) {
	qs.mu.Lock()
	if qs.forcing[key]--; qs.forcing[key] <= 0 {
		delete(qs.forcing, key)
	}
	qs.forcingN.Add(^uint64(0))
	qs.mu.Unlock()
}
