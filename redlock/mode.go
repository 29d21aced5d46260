package redlock

// mode is what an acquire asked for besides its ttl and fencing: a mutex, a reader, a
// place of a limited key, or one of several keys taken together. A lock is handed on
// locally only to a waiter of the same mode, ttl and fencing (handoff.go, suits): a
// handoff never crosses modes. Without this a limit waiter queued behind an exclusive
// holder of the same key (two routes, or a reload that adds limit) was handed that
// holder's exclusive lock: it held none of the key's n places, so other clients could
// hold all n of them at once, n+1 holders.
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
