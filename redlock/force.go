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
// A lock a force release ends while provisional never got the baton: its Acquire keeps it
// and contends again (the baton is spent once, whatever order a release, a force release
// and a handoff run in: state.go; TestForceReleaseLeavesTheBatonWithTheAcquire,
// TestForceReleaseOfAHandedLockLeavesTheBatonWithItsWaiter).
//
// A force release of the key by the same client never misses a joiner (a reader that
// shares the entry of a reader of its client: readgroup.go): the join checks for force
// releases and registers the joiner in one step under queues.mu, where a force release
// numbers itself before it lists the holders it marks lost, so the joiner is either
// refused (it goes to Redis, after the deletes) or listed and marked lost
// (joinReader; TestJoiningReaderCannotEscapeAForceRelease).
//
// A force release of a limited key deletes every place (limit.go).

// Force release and the holders of other clients: the argument
//
// Its race with the holders it frees is inherent: the client's own are marked lost first
// (and a lock that client takes while it forces is given up), another client's learns it
// at its next renewal, and fencing guards the work meanwhile.
//
// Claim: a force release frees only what held the key on a node when it read that node,
// so never a holder granted after ForceRelease returned, however late its commands reach
// a node (held by a partition and retransmitted, read by a paused node when it resumes:
// internal/transport/batcher.go). On each node it takes two steps: forceReadScript reads
// what each of the key's names holds (the lock name's value, each place's, the readers'
// entries, a waiting writer's mark, the readers' turn mark), and forceReleaseScript then
// deletes exactly that, comparing as a release does. A reply that comes after the node
// timeout is dropped, so a delete is sent only with what a read answered during the call;
// a read or a delete that lands after the call gave up deletes at most what was read.
// Every value a lock writes is its Acquire call's 130 random bits and the attempt's number,
// and a reader's entry likewise, so a holder granted on that node after the read holds
// another value there (another entry), which the delete leaves. The readers' lock name
// holds sharedMarker, the one value that is not a holder's own: the delete removes the
// entries it read and then gives the name the expiry of the entries left
// (readersExpiryLua, as every reader script does), deleting it only when none is left, so
// a later reader's entry keeps it. A holder granted on a node between the call and that
// node's read is read and freed: it was being granted as the operator asked.
// (TestForceDeleteFreesOnlyWhatItRead, TestLateForceDeleteSparesALaterHolder; the
// simulation's ledger exempts no holder that asked after a force release returned.)
//
// Not covered: a later readers' turn or waiting writer's mark with the same value as one
// read ("t", a turn's length, one Acquire call's prefix) may be ended by a late delete,
// which costs ordering, never exclusion (Shared locks: readgroup.go); and a key of another
// type under the lock's name (Redisson's hash), which the commands of the ACL line
// (docs/connecting.md) cannot read: the delete takes it if it is still of another type, so
// a later holder of that kind may be freed, never one of ours nor a string Redlock
// client's. A node whose read did not answer in time is left as it is (the operator sees
// its error): a holder that lost a majority to the force learns it at its next renewal,
// and its value there lapses with its ttl.
//
// A lock of another client that the force freed may still be handed on locally before
// its next renewal: a handoff takes no round trip (handoff.go), so that client cannot see
// the force, and the handed lock holds the same deleted values. Its token (the freed
// lock's + 1, within the handoff reserve) is below that of any holder that took the key
// after the deletes: that holder's grant on a node of the freed lock's commit quorum
// found the counter at or above the reserve. So fenced storage refuses the handed lock's
// writes as it refuses the freed lock's, and its next renewal finds the key gone or
// taken (TestHandoffOfALockAnotherClientForceReleased; the simulation's token-order check
// follows a handed lock to the lock it came from: internal/sim/check.go, tokenFreed).
//
// Why not one step that the node refuses after a deadline on its own clock? The client
// would have to map its timeout onto each node's clock: the offset a health check reads is
// only as precise as that check's round trip (up to the node timeout under load), the
// node's clock may drift or step (NTP, a VM resumed) between that reading and the delete,
// and a delete that runs within the uncertainty still deletes whatever holds the key
// then. The client would have to wait out the uncertainty before it reports, and the
// guarantee would rest on clocks where compared values need none. The cost of two steps:
// one more round trip per node, and a call bounded by two node timeouts instead of one
// (a force release is rare).

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
// marks the locks this client holds on it as lost, so their holders stop. It frees what
// held the key when it was called: on each node it reads what the key's names hold, then
// deletes exactly that, so a delete that reaches a node late (a partition, a paused
// node) never frees a holder that came after. The error is non-nil when a node did not
// confirm (the result says which); the rest is done anyway.
func (c *Client) ForceRelease(ctx context.Context, key string) (ForceResult, error) {
	res := ForceResult{Key: key}
	if err := validateKey(key); err != nil {
		return res, err
	}
	// No local handoff of this key while it is being forced: a lock handed on now would
	// hold keys about to be deleted. The holder (a handoff done before is registered by
	// then) is marked lost first. A waiter that then takes the key anew in Redis is not
	// touched: its SETs came after our reads, or were read and are deleted (the narrow
	// race any operator override has; fencing guards it).
	c.queues.beginForce(key)
	defer c.queues.endForce(key)
	held := c.holders(key)
	for _, l := range held {
		l.markLost(LostForceReleased)
	}
	nm, keys := c.forceKeys(key)
	ctx = context.WithoutCancel(ctx)
	res.Nodes = make([]ForceNode, len(c.nodes))
	res.Deleted, _, _ = c.onAll(ctx, "force_release", 0, func(cctx context.Context, i int, nd *node) (bool, error) {
		n, err := c.forceNode(cctx, nd, keys, nm.channel)
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

// forceKeys are the names a force release reads and deletes, in the scripts' order.
func (c *Client) forceKeys(key string) (names, []string) {
	nm := c.names(key)
	keys := []string{nm.lock, nm.writer, nm.turn, nm.readers}
	for _, s := range c.slotNames(key, MaxLimit) {
		keys = append(keys, s.lock)
	}
	return nm, keys
}

// forceNode runs a force release's two steps on one node (scripts.go; the argument is
// at the top of this file): it reads what the key's names hold (bounded by ctx: node_timeout), then,
// if anything, deletes exactly that, bounded by a node_timeout of its own. A read that
// did not answer in time deletes nothing; a delete that lands after its timeout deletes
// only what was read. It returns how many of the lock name and places it deleted.
func (c *Client) forceNode(ctx context.Context, nd *node, keys []string, channel string) (int64, error) {
	dkeys, argv, err := forceRead(ctx, nd, keys, channel)
	if err != nil || dkeys == nil {
		return 0, err
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.NodeTimeout)
	defer cancel()
	return forceReleaseScript.Run(dctx, nd.tr, dkeys, argv...).Int64()
}

// forceRead is a force release's first step on one node: what to delete there
// (forceDeletes), nil when the node holds nothing of the key.
func forceRead(ctx context.Context, nd *node, keys []string, channel string) ([]string, []any, error) {
	reply, err := forceReadScript.Run(ctx, nd.tr, keys).Slice()
	if err != nil {
		return nil, nil, err
	}
	return forceDeletes(reply, keys, channel)
}

// errForceReply: the read's reply is not forceReadScript's (it holds lock values, which
// are secrets: never shown in an error).
var errForceReply = errors.New("redlock: force release: the read's reply has an unexpected form")

// forceDeletes turns forceReadScript's reply into forceReleaseScript's keys and
// arguments: the key's four names, the places read as held, and what each held. Both
// are nil when the node held nothing of the key.
func forceDeletes(reply []any, keys []string, channel string) ([]string, []any, error) {
	if len(reply) < 4 {
		return nil, nil, errForceReply
	}
	r, ok := reply[3].(int64)
	if !ok || r < 0 || int64(len(reply)) < 4+r || (len(reply)-4-int(r))%2 != 0 {
		return nil, nil, errForceReply
	}
	dkeys := append([]string(nil), keys[:4]...)
	argv := []any{channel, reply[0], reply[1], reply[2], r}
	argv = append(argv, reply[4:4+r]...)
	places := reply[4+r:]
	for j := 0; j < len(places); j += 2 {
		p, ok := places[j].(int64)
		if !ok || p < 1 || int(p) > len(keys)-4 {
			return nil, nil, errForceReply
		}
		dkeys = append(dkeys, keys[3+p])
		argv = append(argv, places[j+1])
	}
	if reply[0] == "" && reply[1] == "" && reply[2] == "" && len(places) == 0 {
		return nil, nil, nil // nothing to delete (no entries without the lock name's marker)
	}
	return dkeys, argv, nil
}

// forceBook is the force releases' bookkeeping, kept in queues (under queues.mu) because
// a handoff checks it in the same step as it hands the baton on (baton.handTo).
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

// testHookForceNow, when set (tests only; nil in production), runs in forceNow between its
// two loads, so a test can begin a force release exactly there.
var testHookForceNow atomic.Pointer[func()]

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
//
// Why forceSeq is read before forcingN (both without the lock; beginForce raises forcingN
// and then forceSeq, under queues.mu; the atomics are sequentially consistent): say the
// first load reads seq s. A force numbered above s raised forceSeq after that load, so
// forcedSince(key, s) sees it. A force numbered s or below raised forcingN before its
// forceSeq, hence before our first load, hence before our second: if the second reads 0,
// every increment before it is matched by its own force's endForce before it too (each
// decrement follows its own increment, and the counts are equal), so that force has
// ended and its deletes are done. If the second load reads more than 0, the answer is
// taken under the lock, where the book is consistent. So no force is missed.
// The old order (forcingN, then forceSeq) missed one: forcingN read 0, a force began,
// and forceSeq read its number, so forcedSince called it not begun since
// (TestForceNowCannotMissAForceBeginningBetweenItsLoads).
func (qs *queues) forceNow(key string) uint64 {
	seq := qs.forceSeq.Load()
	if h := testHookForceNow.Load(); h != nil {
		(*h)()
	}
	if qs.forcingN.Load() == 0 {
		return seq // every force numbered up to seq has ended; a later one is numbered above
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
