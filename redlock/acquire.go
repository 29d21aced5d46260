package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/chance"
)

// Acquire takes the lock on key, waiting up to o.Wait while it is busy. It returns:
//   - a *Lock when a quorum granted it with validity left;
//   - a *BusyError when the wait ran out while someone else held it;
//   - an *UnavailableError when fewer than a quorum of nodes
//     answered at all in two rounds in a row (one retry rides out a blip; waiting longer
//     does not make dead nodes come back, so this does not use up the wait);
//   - ctx.Err() when ctx ended first. Nothing stays locked in any of the failure cases.
func (c *Client) Acquire(ctx context.Context, key string, o AcquireOptions) (*Lock, error) {
	return c.acquire(ctx, key, o, false)
}

// acquire is Acquire; several says the lock is one of an AcquireAll's (its mode).
func (c *Client) acquire(ctx context.Context, key string, o AcquireOptions, several bool) (*Lock, error) {
	ttl, err := c.checkAcquire(key, o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	k := &contention{c: c, ctx: ctx, waitCtx: newWaitContext(ctx, start.Add(o.Wait)), key: key, ttl: ttl, fencing: o.Fencing, start: start,
		mode: modeOf(o, several), slots: []names{c.names(key)}}
	defer k.waitCtx.stop()
	k.slots[0].shared = o.Shared
	if o.NoReaders && !o.Shared {
		k.slots[0].turn = "" // its release gives no readers' turn
	}
	if o.Limit > 1 {
		k.slots = c.slotNames(key, o.Limit)
	}
	// Local line first: only one waiter per key per process contends in Redis. The
	// previous holder may hand its lock over with the turn (handoff.go). Readers skip it:
	// they do not exclude each other, and one reader's turn would hold up the next.
	queued := false // behind an earlier caller of this client
	if o.Shared {
		// A reader of this client holding the key may share its entry (readgroup.go).
		if l := c.joinReader(key, ttl, o.Fencing, start, c.queues.forceNow(key)); l != nil {
			return l, nil
		}
	} else {
		var handed *Lock
		k.baton, handed, queued, err = c.queues.take(&k.waitCtx, key, waiter{ttl: ttl, fencing: o.Fencing, mode: k.mode, since: start})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, k.busy(0, 0)
		}
		if handed != nil {
			if handed.keep(&k.baton) {
				return handed, nil
			}
			// Force released before we took it: the baton is ours, the lock is not.
			c.abandon(handed)
		}
	}
	if o.Shared {
		defer c.readers.wait(key)() // a writer's release goes to Redis meanwhile (readgroup.go)
	}
	l, err := k.run()
	if err == nil && queued {
		l.mu.Lock()
		l.waited = true
		l.mu.Unlock()
	}
	if err == nil && o.Shared {
		c.readers.open(l)
	}
	// Unless the lock took the baton (keep), it is still ours: a failed wait, or a limited
	// key, whose holder does not keep the line (the next local waiter tries the other
	// places at once: limit.go).
	k.baton.pass(false)
	return l, err
}

// waitContext is ctx ending when the wait runs out, as context.WithDeadline(ctx,
// deadline) is, without its timer until something waits on it. An uncontended acquire
// (the key's line empty, the first round granted) only asks Err, which needs no timer:
// one timer set and stopped, a context and its registration with ctx saved per request
// (issue 32). Done, once called, is WithDeadline's. It is not shared: the acquiring
// goroutine alone uses it (rounds use the caller's ctx).
type waitContext struct {
	parent   context.Context
	deadline time.Time
	real     context.Context // WithDeadline(parent, deadline), made by the first Done
	cancel   context.CancelFunc
}

func newWaitContext(parent context.Context, deadline time.Time) waitContext {
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return waitContext{parent: parent, deadline: deadline}
}

func (w *waitContext) Deadline() (time.Time, bool) { return w.deadline, true }
func (w *waitContext) Value(key any) any           { return w.parent.Value(key) }

func (w *waitContext) Done() <-chan struct{} {
	if w.real == nil {
		w.real, w.cancel = context.WithDeadline(w.parent, w.deadline)
	}
	return w.real.Done()
}

func (w *waitContext) Err() error {
	if w.real != nil {
		return w.real.Err()
	}
	if err := w.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(w.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// stop releases the timer, if one was made.
func (w *waitContext) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}

// checkAcquire checks an acquire's key and options and returns the lock's ttl.
func (c *Client) checkAcquire(key string, o AcquireOptions) (time.Duration, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	return c.checkOptions(o)
}

// checkOptions checks an acquire's options (Acquire's and AcquireAll's) and returns the
// lock's ttl.
func (c *Client) checkOptions(o AcquireOptions) (time.Duration, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = c.opt.TTL
	}
	switch err := validateTTL(ttl, c.opt.DriftFactor); {
	case err != nil:
		return 0, err
	case ttl > c.opt.MaxTTL:
		// The restart quarantine covers locks up to MaxTTL only (voting.go).
		return 0, fmt.Errorf("redlock: ttl %v is above the client's max_ttl %v", ttl, c.opt.MaxTTL)
	case o.Wait < 0:
		return 0, fmt.Errorf("redlock: wait must be >= 0, got %v", o.Wait)
	case o.Limit < 0 || o.Limit > MaxLimit:
		return 0, fmt.Errorf("redlock: limit must be 0 to %d, got %d", MaxLimit, o.Limit)
	case o.Limit > 1 && o.Shared:
		return 0, errors.New("redlock: a lock cannot be both shared and limited")
	}
	return ttl, nil
}

// contention is one Acquire call's contest for its key in Redis, once it is the head of
// the key's local line (or a reader, which has none).
type contention struct {
	c       *Client
	ctx     context.Context // the caller's
	waitCtx waitContext     // ctx, ending when the wait runs out (pass &waitCtx)
	baton   *baton          // the key's baton in the local line until a lock kept takes it; nil for a reader
	slots   []names         // where the lock may be taken: one, or a limited key's places (limit.go)
	key     string
	owner   string // the random prefix of every value this call writes
	ttl     time.Duration
	fencing bool
	mode    mode
	start   time.Time
	w       *watch // the key's release notices, once watched
	// misses counts, for a reader, the tries refused right after a release notice woke
	// it: readers' turns it missed, each of which doubles the turn it asks for.
	misses int
}

func (k *contention) busy(attempts int, retryAfter time.Duration) error {
	return &BusyError{Key: k.key, Attempts: attempts, Waited: time.Since(k.start), RetryAfter: retryAfter}
}

// watch starts watching the key's release notices (every place of a limited key shares
// the channel), through the local line's shared watch when there is one.
func (k *contention) watch() {
	if k.baton != nil {
		k.w = k.baton.ensureWatch(k.c.notices, k.slots[0].channel)
	} else {
		k.w = k.c.notices.watch(k.slots[0].channel)
	}
	k.c.waitSubscribed(&k.waitCtx, k.w) // or a release could slip past unnoticed
}

// run is the head-of-line loop: try, and while busy wait for a release notice or a
// jittered delay, until the wait runs out.
func (k *contention) run() (*Lock, error) {
	c := k.c
	k.owner = rand.Text() + ":" // 130 random bits: values must be unguessable (they allow release)
	if k.baton == nil {
		defer func() {
			if k.w != nil {
				k.w.unwatch()
			}
		}()
	}
	if k.baton != nil && k.baton.takeYield() {
		// Our release just reached other clients' waiters: give them the first go, so
		// that instances take turns. Bounded: if none of them takes the key, we try.
		k.watch()
		c.yieldTo(&k.waitCtx, k.w)
	}
	unavailable := 0
	noticed := false // the last wait ended with a release notice
	for attempt := 1; ; attempt++ {
		if c.closed.Load() {
			return nil, ErrClosed
		}
		var wake <-chan struct{}
		if k.w != nil {
			wake = k.w.next() // before the try: a notice during it still wakes us
		}
		l, res, retry := k.try(attempt)
		switch {
		case l != nil:
			return l, nil
		case retry:
			continue
		case res.unavailable != nil:
			// One more round after a delay rides out a blip (a reconnect, a slow moment);
			// a second one in a row means the nodes are down: say so now rather than wait.
			unavailable++
			if unavailable > 1 || k.waitCtx.Err() != nil {
				res.unavailable.Key = k.key
				return nil, res.unavailable
			}
			sleep(&k.waitCtx, c.retryDelay(), nil)
			continue
		}
		unavailable = 0
		if noticed && k.slots[0].shared {
			k.misses++ // refused right after a release: the readers' turn, if any, was too short for us
		}
		noticed = false
		switch {
		case k.ctx.Err() != nil:
			return nil, k.ctx.Err()
		case k.waitCtx.Err() != nil:
			return nil, k.busy(attempt, res.minPTTL)
		case k.w == nil:
			// Subscribe before the next try, and make sure enough nodes confirmed, so a
			// release between that try and our sleep cannot go unnoticed.
			k.watch()
			continue
		}
		delay := c.retryDelay()
		if res.minPTTL > 0 && res.minPTTL < delay {
			delay = res.minPTTL // the holder's key expires sooner than our next try
		}
		noticed = sleep(&k.waitCtx, delay, wake) // or until a release notice
	}
}

// try is one round on the key's places. It returns the lock when the round took it, or
// retry when a lock it took had to be given up (a force release began meanwhile) and the
// wait allows another round at once; else the round's result says why not.
func (k *contention) try(attempt int) (l *Lock, res attemptResult, retry bool) {
	c := k.c
	forces := c.queues.forceNow(k.key)
	mark := c.writerMarkTTL()
	if k.waitCtx.Err() != nil {
		mark = 0 // no try after this one: do not hold readers back
	}
	a := try{owner: k.owner, n: attempt, ttl: k.ttl, fencing: k.fencing, mark: mark}
	if k.slots[0].shared {
		a.turnAsk = c.readersTurnAsk(k.misses)
	}
	got, res := c.trySlots(k.ctx, k.slots, a)
	if res.validity <= 0 {
		return nil, res, res.closed // closed: run says ErrClosed
	}
	l = c.newLock(got, k.key, k.owner+strconv.Itoa(attempt), k.ttl, k.fencing, k.mode, k.start, attempt, res)
	if l == nil {
		return nil, res, true // the client shut down meanwhile: run sees it closed
	}
	// A force release of this key that began since this round did may have found no
	// holder registered (ForceRelease marks the holder lost) and deleted our SETs: the
	// lock cannot be trusted. Give it up and, while the wait lasts, try again (the key
	// was just freed).
	line := &k.baton
	if len(k.slots) > 1 {
		line = nil // a place of a limited key: no line kept, no handoff
	}
	if !c.queues.forcedSince(k.key, forces) && l.keep(line) {
		return l, res, false
	}
	c.abandon(l)
	if k.waitCtx.Err() != nil {
		return nil, attemptResult{}, false // busy: the wait is over
	}
	return nil, res, true
}

// sleep waits d, or until ctx ends or wake (if not nil) fires, and reports whether wake
// ended it.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// newLock registers the lock a successful round took, or gives it back and returns nil
// when the client shut down while the round was out.
func (c *Client) newLock(nm names, key, value string, ttl time.Duration, fencing bool, m mode, start time.Time,
	attempt int, res attemptResult) *Lock {
	l := &Lock{c: c, nm: nm, key: key, value: value, ttl: ttl, token: res.token, fencing: fencing, mode: m,
		acquiredAt: start, attempts: attempt, waited: attempt > 1, settled: res.settled, state: provisional}
	if fencing {
		l.tokenMax = res.token + res.reserve
	}
	l.start(res.roundStart)
	// The round is counted in c.pending until here (tryOnce), so that shutdown, which
	// waits for it, sees either the lock registered or its give-back counted in turn.
	defer c.pending.done()
	if !c.register(l) {
		c.abandon(l)
		return nil
	}
	return l
}

// abandon gives up a lock just taken that cannot be trusted, without giving up the
// key's baton in the local queue: it is marked lost, unregistered, and its value deleted
// on every node in the background (after its round's late replies without pipelining,
// as in giveBack).
func (c *Client) abandon(l *Lock) {
	l.mu.Lock()
	l.markLostLocked(&LostError{Key: l.key, Reason: LostForceReleased})
	if l.state == provisional { // else a force release's Release of it is under way and ends it
		l.moveLocked(released)
	}
	l.mu.Unlock()
	c.pending.add(1)
	c.goBackground(func() {
		defer c.pending.done()
		if c.opt.DisablePipelining {
			<-l.settled
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opt.NodeTimeout)
		defer cancel()
		c.releaseOnNodes(ctx, l.nm, l.value, nil, false)
	})
	c.unregister(l) // last: it may shut a closed client down, which waits for the above
}

// waitSubscribed waits until enough nodes confirmed w's subscription that any majority
// includes one of them, at most a node timeout.
func (c *Client) waitSubscribed(ctx context.Context, w *watch) {
	t := time.NewTimer(c.opt.NodeTimeout)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// yieldWait bounds how long a head that yields waits for another client to take the key
// and release it: long enough for their notice and SET to land (a few round trips).
const yieldWait = 5 * time.Millisecond

// yieldTo waits until another client's release notice, or at most yieldWait (or
// node_timeout when smaller). Notices that came before our own release do not count.
func (c *Client) yieldTo(ctx context.Context, w *watch) {
	wake := w.next()
	t := time.NewTimer(min(yieldWait, c.opt.NodeTimeout))
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// writerMarkTTL is how long a writer's waiting mark keeps new readers out (shared locks):
// a waiting writer tries again, and so renews it, at least once per retry delay plus a
// round; a writer that gave up stops holding readers back soon after.
func (c *Client) writerMarkTTL() time.Duration {
	return 2 * (c.opt.RetryDelayMax + c.opt.NodeTimeout)
}

func (c *Client) retryDelay() time.Duration {
	lo, hi := c.opt.RetryDelayMin, c.opt.RetryDelayMax
	if hi <= lo {
		return lo
	}
	return lo + chance.N(hi-lo)
}
