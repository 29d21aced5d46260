package redlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"log/slog"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// maxBatch bounds the keys in one extend call, so one script never blocks a node long.
const maxBatch = 512

// renewer renews every kept-alive lock of a client from one goroutine: the locks that
// fall due together (within an eighth of their interval) go out in one script call per
// node, as Redisson batches its watchdog, instead of one call per lock per node.
type renewer struct {
	c    *Client
	mu   sync.Mutex
	h    renewHeap
	wake chan struct{}
}

func newRenewer(c *Client) *renewer {
	r := &renewer{c: c, wake: make(chan struct{}, 1)}
	c.goBackground(r.run)
	return r
}

// The renewer keeps no state of a lock's own: whether a lock may still be renewed is its
// state and cause (renewable, state.go; read under renewer.mu, then Lock.mu), and whether
// it is scheduled is renewEvery > 0 (KeepAlive or renewWhileWaiting asked; remove takes it back).

func (r *renewer) add(l *Lock, every time.Duration, first time.Time) {
	r.mu.Lock()
	if l.renewable() {
		l.renewEvery = every
		l.renewAt = first
		heap.Push(&r.h, l)
	}
	r.mu.Unlock()
	r.poke()
}

// stopIfIdle begins HandOver's release: only if no renewal of l is in flight, it moves l
// from held to releasing (so none starts from here) and unschedules it, and reports
// whether it did. It is remove without the wait.
func (r *renewer) stopIfIdle(l *Lock) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.renewInFlight > 0 || !l.moveFrom(held, releasing) {
		return false
	}
	if l.heapIdx >= 0 {
		heap.Remove(&r.h, l.heapIdx)
	}
	return true
}

// begin counts an extend of l as a renewal in flight, unless l's release began: then it
// reports false and the extend must not run.
func (r *renewer) begin(l *Lock) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !l.renewable() {
		return false
	}
	l.renewing.Add(1) // under mu, and only while renewable: never after remove's Wait
	l.renewInFlight++
	return true
}

// end is begin's counterpart, once the extend is done.
func (r *renewer) end(l *Lock) {
	r.mu.Lock()
	l.renewInFlight--
	r.mu.Unlock()
	l.renewing.Done()
}

// remove unschedules l and waits for a batch that holds it. Release calls it once l is
// releasing (so nothing schedules it again); stopWaitRenewals, to take renewWhileWaiting's renewals back.
func (r *renewer) remove(l *Lock) {
	r.mu.Lock()
	l.renewEvery = 0
	if l.heapIdx >= 0 {
		heap.Remove(&r.h, l.heapIdx)
	}
	r.mu.Unlock()
	l.renewing.Wait()
}

// renewWhileWaiting renews l every interval until stopWaitRenewals, without KeepAlive:
// AcquireAll keeps the keys it took while it waits for the next (multi.go). The first
// renewal is due interval after the lock was last taken or renewed in Redis.
func (r *renewer) renewWhileWaiting(l *Lock, every time.Duration) {
	r.add(l, every, l.lastRenewed().Add(every))
}

// stopWaitRenewals stops renewWhileWaiting's renewals and waits for one in flight,
// leaving l as Acquire returned it: KeepAlive may schedule it again.
func (r *renewer) stopWaitRenewals(l *Lock) {
	r.remove(l)
}

func (r *renewer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *renewer) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		batch, wait := r.due()
		if len(batch) > 0 {
			r.renew(batch)
			continue
		}
		t.Reset(wait)
		select {
		case <-r.c.ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// due pops the locks due now (or within an eighth of their interval), or says how long
// to sleep until the next one.
func (r *renewer) due() ([]*Lock, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var batch []*Lock
	for len(r.h) > 0 && len(batch) < maxBatch {
		l := r.h[0]
		if l.renewAt.Sub(now) > l.renewEvery/8 {
			break
		}
		heap.Pop(&r.h)
		if !l.renewable() {
			continue // lost (e.g. force released), or its release began: never renew it again
		}
		l.renewing.Add(1) // under mu, and only while scheduled: never after remove's Wait
		l.renewInFlight++
		batch = append(batch, l)
	}
	if len(batch) > 0 || len(r.h) == 0 {
		return batch, time.Hour
	}
	return nil, max(time.Until(r.h[0].renewAt), 0)
}

func (r *renewer) renew(batch []*Lock) {
	errs := r.c.extendBatch(context.Background(), batch)
	now := time.Now()
	r.mu.Lock()
	for i, l := range batch {
		err := errs[i]
		if obs := r.c.opt.Observer; obs != nil {
			obs.Renewal(err)
		}
		switch {
		case isLost(err):
			r.c.opt.Logger.Debug("lock lost during renewal", slog.String("key", l.key), slog.Any("error", err))
		case errors.Is(err, ErrReleased):
		case l.renewEvery == 0 || !l.renewable(): // unscheduled (remove) meanwhile
		default:
			next := l.renewEvery
			if err != nil {
				next = max(l.renewEvery/4, time.Millisecond) // retry sooner while validity lasts
			}
			l.renewAt = now.Add(next)
			heap.Push(&r.h, l)
		}
		l.renewInFlight--
		l.renewing.Done()
	}
	r.mu.Unlock()
}

// extendBatch renews locks in one script call per node, all nodes at once, and waits
// for every node (bounded by node_timeout). Locks renewed on a quorum then re-take the
// nodes where their key is missing (a restarted node rejoins), in a second call to those
// nodes only, also waited for: a re-take that landed after a release would stand for a
// whole ttl. It returns each lock's outcome (see Lock.applyExtend).
func (c *Client) extendBatch(ctx context.Context, locks []*Lock) []error {
	start := time.Now()
	keys, argv := lockArgs(locks, c.seqKey())
	replies := make([][]int64, len(c.nodes))
	_, _, errs := c.onAll(ctx, "extend", 0, func(cctx context.Context, i int, nd *node) (bool, error) {
		if !nd.quarantinedUntil(time.Now()).IsZero() {
			return false, fmt.Errorf("quarantined after restart: %w", transport.ErrNotAsked)
		}
		r, err := extendScript.Run(cctx, nd.tr, keys, argv...).Int64Slice()
		if err == nil && len(r) != len(locks) {
			err = fmt.Errorf("unexpected extend reply of %d items for %d keys", len(r), len(locks))
		}
		if err == nil {
			replies[i] = r
		}
		return true, err
	})
	out := make([]error, len(locks))
	retake := make([][]*Lock, len(c.nodes)) // per node, the renewed locks it is missing
	for j, l := range locks {
		yes, no, absent := 0, 0, 0
		for i := range c.nodes {
			switch {
			case replies[i] == nil:
			case replies[i][j] == 1:
				yes++
			case replies[i][j] == 2:
				absent++
			default:
				no++
			}
		}
		out[j] = l.applyExtend(start, yes, no, absent, errs)
		if g := l.readGroup(); out[j] == nil && g != nil {
			c.readers.renewed(g, l.validUntil())
		}
		// Readers are not re-taken: an entry put back would have to be put back with
		// the name's marker, and a quorum of entries keeps the reader safe without it.
		if out[j] == nil && absent > 0 && !l.nm.shared {
			for i := range c.nodes {
				if replies[i] != nil && replies[i][j] == 2 {
					retake[i] = append(retake[i], l)
				}
			}
		}
	}
	c.retake(ctx, retake)
	return out
}

// retake puts renewed locks back on the nodes that lost them. Best effort: the locks
// already hold on a quorum; a failure only leaves a node out until the next renewal.
func (c *Client) retake(ctx context.Context, perNode [][]*Lock) {
	if !slices.ContainsFunc(perNode, func(ls []*Lock) bool { return len(ls) > 0 }) {
		return
	}
	c.onAll(ctx, "retake", 0, func(cctx context.Context, i int, nd *node) (bool, error) {
		if len(perNode[i]) == 0 {
			return false, transport.ErrNotAsked
		}
		keys, argv := lockArgs(perNode[i], c.seqKey())
		return true, retakeScript.Run(cctx, nd.tr, keys, argv...).Err()
	})
}

// lockArgs are the KEYS and ARGV of extendScript and retakeScript for locks: the lock
// names, then the readers' sets of the readers among them; the values, the ttls, and
// whether each is a reader (retakeScript, given no readers, ignores the third part).
// The last key is the node's write sequence, seq ("" for none: rollback.go).
func lockArgs(locks []*Lock, seq string) ([]string, []any) {
	n := len(locks)
	keys := make([]string, n, n+2)
	argv := make([]any, 3*n)
	for i, l := range locks {
		keys[i] = l.nm.lock
		argv[i] = l.value
		argv[n+i] = l.ttl.Milliseconds()
		argv[2*n+i] = boolArg(l.nm.shared)
		if l.nm.shared {
			keys = append(keys, l.nm.readers)
		}
	}
	return append(keys, seq), argv
}

// renewHeap orders kept-alive locks by their next renewal.
type renewHeap []*Lock

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].renewAt.Before(h[j].renewAt) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *renewHeap) Push(x any) {
	l := x.(*Lock)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}
func (h *renewHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.heapIdx = -1
	*h = old[:len(old)-1]
	return l
}
