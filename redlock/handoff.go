package redlock

import (
	"time"
)

// Local handoff: when a lock is released while another caller of this client waits for
// the same key, the lock in Redis is not deleted and taken again; it is handed to that
// caller as it is (same value on the same majority, same validity, renewals continuing).
// A hot key then changes hands within a process in no Redis round trip at all.
//
// It is bounded: after Options.HandoffLimit handoffs in a row the lock is released in
// Redis, and if the release notice reached another client's waiters (PUBLISH counts its
// receivers), the next local head lets them take the key first (see contend). So
// instances take turns in streaks, and none starves another.
//
// Fencing: each handed lock carries the previous token + 1. That is safe without a round
// trip because the acquire committed token + HandoffLimit, not token, on a majority
// (tryOnce): every later grant overlaps that majority and gets a larger token, and the
// handed tokens token+1 .. token+HandoffLimit are all above the tokens before. A streak
// ends when the reserve is used up.

// defaultHandoffLimit is how many times in a row a lock may be handed to a local waiter
// before it goes back through Redis.
const defaultHandoffLimit = 8

// maxHandoffLimit caps Options.HandoffLimit: with fencing, every acquire holds that many
// tokens (µs of the nodes' clocks) back for handoffs (fencing.go).
const maxHandoffLimit = 64

// handoff hands l (just released by its holder, not lost) to the next local waiter, if
// the rules above allow it and no force release of the key began since forces (forceNow,
// taken before l was ended here: a force release after that could not mark l lost, and
// its deletes would leave the handed lock held nowhere). It reports whether it did; l
// must not be used afterwards.
func (c *Client) handoff(l *Lock, forces uint64) bool {
	until, ok := c.handoffAllowed(l)
	if !ok {
		return false
	}
	// Provisional until its waiter takes it (Acquire, keep): a force release meanwhile
	// leaves the baton with that waiter (take returned it), which then contends for the
	// key itself.
	next := &Lock{c: c, nm: l.nm, key: l.key, value: l.value, ttl: l.ttl, fencing: l.fencing, mode: l.mode,
		tokenMax: l.tokenMax, settled: l.settled, streak: l.streak + 1, handed: true, waited: true,
		state: provisional}
	if l.fencing {
		next.token = l.token + 1
	}
	if !l.baton.handTo(next, forces, suits(l), func(w waiter) {
		next.acquiredAt = w.since
		next.startUntil(until)
		c.replaceHeld(l, next)
	}) {
		return false
	}
	l.move(handedOn)
	return true
}

// handoffAllowed applies the rules above to l and returns its validity end.
func (c *Client) handoffAllowed(l *Lock) (until time.Time, ok bool) {
	limit := c.opt.HandoffLimit
	// Readers of this client waiting for the key go next (readgroup.go, phases).
	if limit <= 0 || l.streak >= limit || (l.fencing && l.token >= l.tokenMax) || c.readers.readersWait(l.key) {
		return until, false
	}
	l.mu.Lock()
	until, line := l.until, l.baton != nil // a lock without a line (or not kept) is never handed on
	l.mu.Unlock()
	if !line {
		return until, false
	}
	// The next holder starts with what is left; keep it a fair part of a fresh lock so
	// that its first renewal, scheduled from the last one, is not already late.
	return until, time.Until(until) >= l.ttl/2
}

// suits says which waiters l may be handed to: those that asked for the same lock, in
// the same mode (mode.go: a handoff never crosses modes).
func suits(l *Lock) func(waiter) bool {
	return func(w waiter) bool { return w.ttl == l.ttl && w.fencing == l.fencing && w.mode == l.mode }
}

// handoffLikely says, without changing anything, whether handoff(l) would find the
// rules met and a suitable waiter queued (for HandOver; handoff itself decides).
func (c *Client) handoffLikely(l *Lock) bool {
	if _, ok := c.handoffAllowed(l); !ok || l.err() != nil {
		return false
	}
	return l.baton.headAccepts(suits(l))
}

// handoffReserve is how many tokens above its own an acquire with fencing asks the nodes
// to hold back, so that handed locks can use them.
// Readers are never handed on (they have no local line): no reserve.
func (c *Client) handoffReserve(nm names) int64 {
	if nm.shared {
		return 0
	}
	return int64(max(c.opt.HandoffLimit, 0))
}
