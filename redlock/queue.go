package redlock

import (
	"context"
	"sync"
	"time"
)

// queues serialize a process's own waiters per key: only the head of a key's queue
// contends in Redis, the others wait here in arrival order without any Redis traffic and
// without a goroutine of their own. The head's baton (a baton value, below) stays with the
// lock it took while that is held and passes to the next waiter on release, together
// with the lock itself when it can (handoff.go).
type queues struct {
	mu        sync.Mutex
	m         map[string]*keyQueue
	forceBook // the force releases' marks (force.go), guarded by mu
}

type keyQueue struct {
	key      string
	batonOut bool     // a baton of this line is out (unspent)
	waiters  []waiter // FIFO
	refs     int      // owner + waiters; the queue is dropped at 0
	watch    *watch   // release-notice subscription, while someone waits
	// handed is the lock that comes with the baton when the previous holder handed it
	// over; the waiter whose channel was closed takes it.
	handed *Lock
	// yield asks the next head to let other clients take the key first: the release
	// that passed the baton found them waiting (see Lock.Release).
	yield bool
}

// waiter is one caller queued for a key's baton.
type waiter struct {
	ch      chan struct{} // closed to hand over the baton
	ttl     time.Duration // what it asked for: a lock is handed only to a waiter that
	fencing bool          // wants the same ttl, fencing and mode (handoff.go, suits)
	mode    mode
	since   time.Time // when its Acquire began
}

func newQueues() *queues {
	return &queues{m: map[string]*keyQueue{}, forceBook: forceBook{forcing: map[string]int{}, forced: map[string]forceMark{}}}
}

// baton is one caller's baton at the head of a key's local line: a value with one owner
// at a time (an Acquire, then the lock it kept: Lock.keep moves it). It is spent once, by
// pass (the next waiter gets a baton of its own, or the line is freed) or by handTo (the
// next waiter gets it together with the lock); a spent baton does nothing. So the baton
// goes to the next waiter at most once per holder by construction, whatever order a
// release, a force release and a handoff run in.
type baton struct {
	qs    *queues
	q     *keyQueue
	spent bool // guarded by qs.mu
}

// take waits for the key's baton. On success the caller owns the returned baton and must
// spend it exactly once (pass, or by keeping a lock that takes it: Lock.keep); the
// returned lock is non-nil when the previous holder handed its lock over with the baton.
func (qs *queues) take(ctx context.Context, key string, w waiter) (t *baton, handed *Lock, queued bool, err error) {
	qs.mu.Lock()
	q := qs.m[key]
	if q == nil {
		q = &keyQueue{key: key}
		qs.m[key] = q
	}
	q.refs++
	t = &baton{qs: qs, q: q}
	if !q.batonOut {
		q.batonOut = true
		qs.mu.Unlock()
		return t, nil, false, nil
	}
	w.ch = make(chan struct{})
	q.waiters = append(q.waiters, w)
	qs.mu.Unlock()

	select {
	case <-w.ch:
		return t, t.takeHanded(), true, nil
	case <-ctx.Done():
	}
	qs.mu.Lock()
	for i, o := range q.waiters {
		if o.ch == w.ch { // still queued: leave the line
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			t.spent = true // it was never ours
			qs.dropRefLocked(q)
			qs.mu.Unlock()
			return nil, nil, true, ctx.Err()
		}
	}
	qs.mu.Unlock()
	// The baton was handed to us as we gave up: pass it on, with the lock if one came
	// (and is still held: one force released meanwhile left the baton with us).
	if l := t.takeHanded(); l != nil && l.keep(&t) {
		_ = l.Release(context.Background()) // the lock owns the baton now: its release passes it
	} else {
		if l != nil {
			l.c.abandon(l)
		}
		t.pass(false)
	}
	return nil, nil, true, ctx.Err()
}

// takeHanded takes the lock that came with the baton, if any (once).
func (t *baton) takeHanded() *Lock {
	t.qs.mu.Lock()
	defer t.qs.mu.Unlock()
	l := t.q.handed
	t.q.handed = nil
	return l
}

// pass spends the baton: the next waiter gets the baton, or the line is freed. yield is
// passed on to the next head (ignored when nobody waits). A nil or spent baton does
// nothing.
func (t *baton) pass(yield bool) {
	if t == nil {
		return
	}
	qs, q := t.qs, t.q
	qs.mu.Lock()
	if t.spent {
		qs.mu.Unlock()
		return
	}
	t.spent = true
	if len(q.waiters) > 0 {
		next := q.waiters[0]
		q.waiters = q.waiters[1:]
		q.handed, q.yield = nil, yield
		close(next.ch)
	} else {
		q.batonOut, q.yield = false, false
	}
	w := qs.dropRefLocked(q)
	qs.mu.Unlock()
	if w != nil {
		w.unwatch()
	}
}

// handTo spends the baton by giving it, together with lock l, to the next waiter if there
// is one and accept(it) says the lock suits it, and reports whether it did (else the
// baton stays unspent). register runs under the queue lock before the waiter can see l
// (so the client's table never lists a lock its holder released).
func (t *baton) handTo(l *Lock, forces uint64, accept func(waiter) bool, register func(next waiter)) bool {
	qs, q := t.qs, t.q
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if t.spent || len(q.waiters) == 0 || !accept(q.waiters[0]) || qs.forcing[q.key] > 0 {
		return false
	}
	if qs.forcedSinceLocked(q.key, forces) {
		return false // a force release began since the lock was ended here
	}
	t.spent = true
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	register(next)
	q.handed, q.yield = l, false
	close(next.ch)
	q.refs-- // the previous holder's reference; the queue lives on for the new holder
	return true
}

// headAccepts reports whether handTo would find a waiter now (see handTo).
func (t *baton) headAccepts(accept func(waiter) bool) bool {
	qs, q := t.qs, t.q
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return !t.spent && len(q.waiters) > 0 && accept(q.waiters[0]) && qs.forcing[q.key] == 0
}

// takeYield reports (once) whether the head should let other clients go first.
func (t *baton) takeYield() bool {
	t.qs.mu.Lock()
	defer t.qs.mu.Unlock()
	y := t.q.yield
	t.q.yield = false
	return y
}

// subscribed reports whether this client listens for the key's release notices.
func (t *baton) subscribed() bool {
	t.qs.mu.Lock()
	defer t.qs.mu.Unlock()
	return t.q.watch != nil
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

// ensureWatch subscribes the line to its key's release notices (once per line life).
func (t *baton) ensureWatch(n *notifier, channel string) *watch {
	t.qs.mu.Lock()
	defer t.qs.mu.Unlock()
	if t.q.watch == nil {
		t.q.watch = n.watch(channel)
	}
	return t.q.watch
}
