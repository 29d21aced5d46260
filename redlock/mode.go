package redlock

// Handoffs stay within a mode
//
// A key's waiters of one client share one local line whatever their mode, but a lock is
// handed on only to a waiter that asked for the same mode, ttl and fencing (handoff.go,
// suits). Claim: a limit request always holds one of the key's n places. It gets its
// lock from a round on a place, never from a handoff: places are not handed on (their
// holder leaves the line at once), and an exclusive lock of the same key (another route
// of the same client) is never handed to a limit waiter, which would then hold no place
// while other clients hold all n (TestHandoffNeverGivesALimitWaiterAnExclusiveLock).
// Likewise a lock taken as one of several keys is handed only to another AcquireAll
// waiting for that key, never to a single-key waiter, and the reverse
// (TestHandoffStaysWithinAMode).

// mode is what an acquire asked for besides its ttl and fencing: a mutex, a reader, a
// place of a limited key, or one of several keys taken together. A lock is handed on
// locally only to a waiter of the same mode, ttl and fencing (handoff.go, suits): a
// handoff never crosses modes. Without this rule a limit waiter queued behind an
// exclusive holder of the same key (two routes, or a reload that adds limit) would be
// handed that holder's exclusive lock: it would hold none of the key's n places, so other
// clients could hold all n of them at once, n+1 holders.
type mode struct {
	limit   int  // > 1: a limited key (limit.go); the lock is one of its places
	shared  bool // a reader (no local line: never handed on)
	several bool // one of the locks of an AcquireAll
}

func modeOf(o AcquireOptions, several bool) mode {
	m := mode{shared: o.Shared, several: several}
	if o.Limit > 1 {
		m.limit = o.Limit
	}
	return m
}
