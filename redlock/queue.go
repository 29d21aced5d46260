package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// queues serialize a process's own waiters per key: only the head of a key's queue
// contends in Redis, the others wait here in arrival order without any Redis traffic and
// without a goroutine of their own. The head keeps its turn while it holds the lock and
// passes it to the next waiter on release, together with the lock itself when it can
// (handoff.go).
type queues struct {
	mu sync.Mutex
	m  map[string]*keyQueue
	// forcing counts the force releases under way per key: no handoff meanwhile.
	forcing map[string]int
	// forceSeq numbers force releases; forced remembers, per key, the latest one for
	// forcedMemory, so that an acquire round can tell whether a force on its key began
	// since the round did (forcedSince).
	// Both atomics are written under mu, and read without it on the hot path (every
	// acquire round and release asks): forcingN counts force releases under way.
	forceSeq, forcingN atomic.Uint64
	forced             map[string]forceMark
}

type keyQueue struct {
	key       string
	turnTaken bool     // a caller owns the turn
	waiters   []waiter // FIFO
	refs      int      // owner + waiters; the queue is dropped at 0
	watch     *watch   // release-notice subscription, while someone waits
	// handed is the lock that comes with the turn when the previous holder handed it
	// over; the waiter whose channel was closed takes it.
	handed *Lock
	// yield asks the next head to let other clients take the key first: the release
	// that passed the turn found them waiting (see Lock.Release).
	yield bool
}

// waiter is one caller queued for a key's turn.
type waiter struct {
	ch      chan struct{} // closed to hand over the turn
	ttl     time.Duration // what it asked for: a lock is handed only to a waiter that
	fencing bool          // wants the same ttl, fencing and mode (handoff.go, suits)
	mode    mode
	since   time.Time // when its Acquire began
}

func newQueues() *queues {
	return &queues{m: map[string]*keyQueue{}, forcing: map[string]int{}, forced: map[string]forceMark{}}
}

// turn waits for the key's turn. On success the caller owns the turn and must give it
// back exactly once (done, or by releasing the lock it got); the returned lock is non-nil
// when the previous holder handed its lock over with the turn.
func (qs *queues) turn(ctx context.Context, key string, w waiter) (q *keyQueue, handed *Lock, queued bool, err error) {
	qs.mu.Lock()
	q = qs.m[key]
	if q == nil {
		q = &keyQueue{key: key}
		qs.m[key] = q
	}
	q.refs++
	if !q.turnTaken {
		q.turnTaken = true
		qs.mu.Unlock()
		return q, nil, false, nil
	}
	w.ch = make(chan struct{})
	q.waiters = append(q.waiters, w)
	qs.mu.Unlock()

	select {
	case <-w.ch:
		return q, qs.takeHanded(q), true, nil
	case <-ctx.Done():
	}
	qs.mu.Lock()
	for i, o := range q.waiters {
		if o.ch == w.ch { // still queued: leave the line
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			qs.dropRefLocked(q)
			qs.mu.Unlock()
			return nil, nil, true, ctx.Err()
		}
	}
	qs.mu.Unlock()
	// The turn was handed to us as we gave up: pass it on, with the lock if one came
	// (and is still held: one force released meanwhile left the turn with us).
	if l := qs.takeHanded(q); l != nil && l.keep() {
		_ = l.Release(context.Background())
	} else {
		if l != nil {
			l.c.abandon(l)
		}
		qs.done(q, false)
	}
	return nil, nil, true, ctx.Err()
}

func (qs *queues) takeHanded(q *keyQueue) *Lock {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	l := q.handed
	q.handed = nil
	return l
}

// done gives the turn to the next waiter, or frees the queue. yield is passed on to the
// next head (ignored when nobody waits).
func (qs *queues) done(q *keyQueue, yield bool) {
	qs.mu.Lock()
	if len(q.waiters) > 0 {
		next := q.waiters[0]
		q.waiters = q.waiters[1:]
		q.handed, q.yield = nil, yield
		close(next.ch)
	} else {
		q.turnTaken, q.yield = false, false
	}
	w := qs.dropRefLocked(q)
	qs.mu.Unlock()
	if w != nil {
		w.unwatch()
	}
}

// handTo gives the turn together with lock l to the next waiter if there is one and
// accept(it) says the lock suits it. register runs under the queue lock before the
// waiter can see l (so the client's table never lists a lock its holder released).
func (qs *queues) handTo(q *keyQueue, l *Lock, forces uint64, accept func(waiter) bool, register func(next waiter)) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if len(q.waiters) == 0 || !accept(q.waiters[0]) || qs.forcing[q.key] > 0 {
		return false
	}
	if qs.forcedSinceLocked(q.key, forces) {
		return false // a force release began since the lock was ended here
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	register(next)
	q.handed, q.yield = l, false
	close(next.ch)
	q.refs-- // the previous holder's reference; the queue lives on for the new holder
	return true
}

// headAccepts reports whether handTo would find a waiter now (see handTo).
func (qs *queues) headAccepts(q *keyQueue, accept func(waiter) bool) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return len(q.waiters) > 0 && accept(q.waiters[0]) && qs.forcing[q.key] == 0
}

// takeYield reports (once) whether the head should let other clients go first.
func (qs *queues) takeYield(q *keyQueue) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	y := q.yield
	q.yield = false
	return y
}

// subscribed reports whether this client listens for the key's release notices.
func (qs *queues) subscribed(q *keyQueue) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return q.watch != nil
}

// dropRefLocked returns the queue's watch when the queue is dropped, for the caller to end
// outside the lock.
func (qs *queues) dropRefLocked(q *keyQueue) *watch {
	q.refs--
	if q.refs > 0 {
		return nil
	}
	delete(qs.m, q.key)
	w := q.watch
	q.watch = nil
	return w
}

// waiting returns the number of callers queued behind the head, per key.
func (qs *queues) waiting() map[string]int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	out := make(map[string]int, len(qs.m))
	for k, q := range qs.m {
		out[k] = len(q.waiters)
	}
	return out
}

// ensureWatch subscribes the queue to its key's release notices (once per queue life).
func (qs *queues) ensureWatch(q *keyQueue, n *notifier, channel string) *watch {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q.watch == nil {
		q.watch = n.watch(channel)
	}
	return q.watch
}
