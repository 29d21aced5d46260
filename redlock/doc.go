// Package redlock implements the Redlock distributed lock on N independent Redis masters,
// with renewal, release notices for waiters and optional fencing tokens. It knows nothing
// of HTTP or Caddy and can be used as a plain Go library:
//
//	c, err := redlock.New([]string{"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"}, redlock.Options{})
//	l, err := c.Acquire(ctx, "account:42", redlock.AcquireOptions{Wait: 5 * time.Second, Fencing: true})
//	if err != nil { ... errors.Is(err, redlock.ErrBusy) / redlock.ErrUnavailable / ctx.Err() ... }
//	defer l.Release(ctx)
//	l.KeepAlive(c.TTL()/3, time.Minute) // renew while working; l.Lost() closes if that fails
//	select { case <-l.Lost(): /* stop working: the lock is gone */ ; case <-work(l.Token()): }
//
// # Protocol
//
// Acquire sends one command (a plain SET key value NX PX ttl on a first try, else a script
// that also lets a retry take over its own earlier attempt's value) to all nodes at
// once, each call bounded by node_timeout, and returns as soon as the outcome is known. The
// lock is held iff a quorum (N/2+1) granted it and validity = ttl - elapsed - drift > 0, with
// drift = ttl*drift_factor + 2ms and elapsed read from the monotonic clock. A failed round
// is released on every node that may hold our value, and the next try waits for a release
// notice or a jittered delay. Release is compare-and-delete on all nodes; extend is
// compare-and-pexpire on all nodes, re-taking nodes where the key vanished, and must reach
// a quorum within the current validity.
//
// # Safety argument for fencing tokens
//
// Claim: if holder A used token a and a later holder B of the same key got token b, then
// b > a.
//
// Each node keeps a counter per key. When a node grants a lock with fencing on, it sets
// counter = max(counter+1, now_µs) and returns it; the token is the maximum over the
// quorum G that granted. Before Acquire returns, a commit script raises counter to at
// least the token on a quorum C, and only on nodes where the key still holds A's value.
//
// C and B's granting quorum G_B are both majorities, so they share a node x. On x, A's
// commit ran while x held A's value; B's grant on x needed the key to be absent, so it ran
// later, when counter_x >= a already. B's grant set counter_x to at least a+1, and
// b = max over G_B >= counter_x > a. Pauses and expiry don't matter: the order on x is
// fixed by x itself (one script runs at a time).
//
// Local handoffs (handoff.go) hand the lock to the next waiter of the same Client with
// token+1, without a round trip. That stays inside the claim because the commit raises
// counter to a+K, not a, where K = HandoffLimit bounds the handoffs in a row: the handed
// tokens a+1 .. a+K are above every earlier token, strictly increase, and stay below any
// later grant, which by the argument above is at least a+K+1.
//
// Restarts: if x restarted without its data between A's commit and B's grant, counter_x
// is gone. Two guards: (1) a node whose run_id changed does not vote for ttl+drift after
// the client sees it back (the delayed-restart rule; a new connection checks the run_id
// before it carries a command), so A's lock has lapsed before x can grant again; a client
// that never saw x before reads x's uptime instead and holds x back until ttl+drift after
// x's start, unless x started together with a majority of the nodes (a fresh start: it
// cannot tell that from a majority restart, which Redlock without persistence cannot
// survive anyway), and (2) a
// missing counter starts from the node's clock in microseconds, which is larger than every
// token issued before the restart as long as node clocks differ by less than the
// quarantine. Counters also expire after an hour unused for the same reason: re-created,
// they start from the clock. Use AOF with appendfsync always where you can; the clock
// rule is the fallback, and the assumption (bounded clock skew between nodes) is stated
// in the README.
//
// # Waiting
//
// Within one Client, waiters for one key form a FIFO; only the head contends in Redis.
// The head subscribes to the key's release channel on every node (one subscriber
// connection per node per Client) and waits until enough nodes confirmed the
// subscription that any majority includes one of them, so a release cannot slip between
// its try and its sleep. Release publishes on every node it deletes from.
package redlock
