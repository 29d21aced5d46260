package redlock

import (
	"context"
	"sync"
)

// queues serialize a process's own waiters per key: only the head of a key's queue
// contends in Redis, the others wait here in arrival order without any Redis traffic and
// without a goroutine of their own. The head keeps its turn while it holds the lock and
// hands it to the next waiter on release.
type queues struct {
	mu sync.Mutex
	m  map[string]*keyQueue
}

type keyQueue struct {
	key     string
	busy    bool            // a caller owns the turn
	waiters []chan struct{} // FIFO; closed to hand over the turn
	refs    int             // owner + waiters; the queue is dropped at 0
	watch   *watch          // release-notice subscription, while someone waits
}

func newQueues() *queues { return &queues{m: map[string]*keyQueue{}} }

// turn waits for the key's turn. On success the caller must call done exactly once.
func (qs *queues) turn(ctx context.Context, key string) (*keyQueue, error) {
	qs.mu.Lock()
	q := qs.m[key]
	if q == nil {
		q = &keyQueue{key: key}
		qs.m[key] = q
	}
	q.refs++
	if !q.busy {
		q.busy = true
		qs.mu.Unlock()
		return q, nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	qs.mu.Unlock()

	select {
	case <-ch:
		return q, nil
	case <-ctx.Done():
	}
	qs.mu.Lock()
	for i, w := range q.waiters {
		if w == ch { // still queued: leave the line
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			qs.dropRefLocked(q)
			qs.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	qs.mu.Unlock()
	// The turn was handed to us as we gave up: pass it on.
	qs.done(q)
	return nil, ctx.Err()
}

// done gives the turn to the next waiter, or frees the queue.
func (qs *queues) done(q *keyQueue) {
	qs.mu.Lock()
	if len(q.waiters) > 0 {
		next := q.waiters[0]
		q.waiters = q.waiters[1:]
		close(next)
	} else {
		q.busy = false
	}
	w := qs.dropRefLocked(q)
	qs.mu.Unlock()
	if w != nil {
		w.unwatch()
	}
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
