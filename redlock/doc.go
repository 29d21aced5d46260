// Package redlock implements the Redlock distributed lock on N independent Redis masters,
// with renewal, release notices for waiters and optional fencing tokens. It knows nothing
// of HTTP or Caddy and can be used as a plain Go library:
//
//	c, err := redlock.New([]string{"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"}, redlock.Options{})
//	if err != nil { ... an invalid option or node URL: the error names it ... }
//	defer c.Close()
//	l, err := c.Acquire(ctx, "account:42", redlock.AcquireOptions{Wait: 5 * time.Second, Fencing: true})
//	if err != nil { ... a *redlock.BusyError, *redlock.UnavailableError or ctx.Err() ... }
//	defer l.Release(ctx)
//	l.KeepAlive(3*time.Second, time.Minute) // renew while working (ttl 10s by default)
//	ctx, cancel := l.Context(ctx)           // cancelled, with a *redlock.LostError, if the lock is lost
//	defer cancel()
//	err = work(ctx, l.Token())              // pass the fencing token to the storage the lock guards
//
// # Errors
//
// Acquire and AcquireAll return a lock, or:
//   - a *BusyError when someone else held the key for the whole wait
//     (AcquireOptions.Wait); RetryAfter hints when it may be free;
//   - an *UnavailableError when fewer than a quorum of nodes answered at all, in two
//     rounds in a row (it does not use up the wait); Nodes says which failed and why;
//   - ErrClosed once the Client was closed;
//   - ctx.Err() when ctx ended first, or an error naming the bad input.
//
// Nothing stays locked after any of them.
//
// A lock that was held can be lost: its validity ended without a renewal, a majority of
// the nodes holds another value or no key at all, its hold reached the maxHold given to
// KeepAlive, or an operator called ForceRelease. Its Context is then cancelled with a
// *LostError as the cause, whose Reason says which; LockInfo.Err reports the same. Once
// the lock is released its Context is cancelled with ErrReleased, and a second Release
// returns ErrReleased.
//
// A *ConfigError is a node error only the operator can fix: a TLS failure, an ACL refusal
// or refused credentials (its Kind), with what to check (its Hint). A node with one is
// unusable, not down; NodeStatus.LastErr holds it, and errors.As finds it among an
// UnavailableError's Nodes.
//
// # Guarantees
//
// A lock is held when a quorum (N/2+1) of the nodes granted it and validity is left: the
// ttl minus the time its round took minus a drift allowance (ttl × DriftFactor + 2ms),
// counted on the client's monotonic clock from before the round. While its validity
// lasts, no other holder of any client holds the key (shared readers excepted: they
// hold it together). Release and renewal compare the lock's secret value first, so they
// never touch another holder's key. This assumes what Redlock assumes: clocks that run
// at about the same rate (within DriftFactor), and no pause of the holder longer than
// the validity left, which fencing tokens guard against: with AcquireOptions.Fencing,
// Lock.Token strictly increases across the holders of a key, of every client, so the
// storage the lock guards can refuse a paused holder's late write.
//
// A node that may have lost its keys (a restart without persistence, FLUSHALL, an
// eviction, a failover behind one address) does not vote for a quarantine: the longest
// MaxTTL any client announced to the nodes, plus drift, from when a client saw the loss
// (NodeStatus.QuarantinedUntil, QuarantineCause). Fencing tokens also assume that the
// Redis nodes' clocks differ by less than that quarantine minus 200ms and HandoffLimit
// µs: tokens follow the nodes' clocks, in µs. Set MaxTTL alike on every client of a node set
// (the longest ttl used there), run the nodes with maxmemory-policy noeviction, and with
// AOF where you can. A majority of the nodes losing their data at once is beyond what
// Redlock without persistence can survive.
//
// The safety notes (docs/safety.md) state each assumption and what operators keep
// consistent; the design notes (docs/design.md) index the argument for every claim and
// the tests that check it.
//
// # Lock modes
//
// AcquireOptions picks the mode of a lock:
//   - exclusive, the default: one holder at a time;
//   - Shared: readers hold the key together, never while an exclusive holder (a writer)
//     does; a waiting writer keeps new readers out, and readers that a writer kept out
//     get a turn at its release: readers and writers take turns;
//   - Limit n > 1: up to n holders at once across all clients (n places, each an
//     exclusive lock of its own; Client.Inspect shows them);
//   - Client.AcquireAll: several keys, all or none, taken in sorted order so that
//     callers cannot deadlock.
//
// Within one Client, waiters for a key queue in arrival order (readers excepted: they go
// in together), and a released lock may be handed to the next waiter without a Redis
// round trip (Lock.HandOver, Options.HandoffLimit), only to one that asked for the same
// mode, ttl and fencing. Readers and the places of a limited key are never handed on.
//
// # Links
//
//   - [Using the redlock package as a library]: more examples and the options' defaults
//   - [Safety notes]: the assumptions, and what operators keep consistent
//   - [Design]: the protocol, the package's map and lock order, and an index of the
//     safety arguments with the tests and the simulation that check them
//
// [Using the redlock package as a library]: https://github.com/caddy-redlock/caddy-redlock/blob/main/docs/library.md
// [Safety notes]: https://github.com/caddy-redlock/caddy-redlock/blob/main/docs/safety.md
// [Design]: https://github.com/caddy-redlock/caddy-redlock/blob/main/docs/design.md
package redlock
