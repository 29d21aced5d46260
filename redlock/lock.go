package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a held Redlock. Its methods are safe for concurrent use.
type Lock struct {
	c          *Client
	nm         names
	key        string
	value      string // secret: never logged, shown or returned
	ttl        time.Duration
	token      int64
	tokenMax   int64 // with fencing: the largest token handed locks may use (handoff.go)
	fencing    bool
	mode       mode      // what the acquire asked for: handed on only to the same (mode.go)
	acquiredAt time.Time // when Acquire was called
	takenAt    time.Time // when this holder got the lock (the grant, a handoff or a join): maxHold counts from here
	attempts   int
	settled    <-chan struct{} // the winning round's stragglers have replied
	streak     int             // handoffs since the lock was last taken in Redis
	handed     bool            // it came from the previous local holder, not from Redis
	group      *readGroup      // a reader: the client's readers sharing its entry (readgroup.go)

	mu       sync.Mutex
	until    time.Time // validity ends (monotonic)
	renewals int
	waited   bool // the acquire found the key held and waited (LockInfo.Waited)
	// state is where the lock is in its life, cause why it can no longer be trusted (nil
	// while it can): state.go has both and the moves between states.
	state lockState
	cause error
	// baton is the key's baton in the local line, once keep moved it here from the Acquire
	// (nil before, and for a lock without a line: a reader, a place of a limited key).
	// Written once, by keep, under mu and before the state leaves provisional: whoever
	// has seen the lock held or releasing under mu may read it without mu (the handoff).
	baton *baton
	// done is cancelled, with cause as its cause, the moment the lock is lost or
	// released (Context).
	done      context.Context
	endDone   context.CancelCauseFunc
	expiry    *time.Timer // marks the lock lost when validity ends without renewal
	maxHold   *time.Timer
	keepAlive bool

	// Renewal scheduling, guarded by the client's renewer.mu.
	renewEvery    time.Duration
	renewAt       time.Time
	heapIdx       int            // index in the renewer's heap, -1 when not scheduled
	renewing      sync.WaitGroup // renewals of this lock in flight (a batch, or an extend)
	renewInFlight int            // how many, readable without waiting
}

// start arms the validity timer of a freshly acquired lock (all other fields set).
func (l *Lock) start(roundStart time.Time) {
	l.startUntil(roundStart.Add(l.ttl - drift(l.ttl, l.c.opt.DriftFactor)))
}

// startUntil arms the validity timer of a lock valid until until (all other fields set).
func (l *Lock) startUntil(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done, l.endDone = context.WithCancelCause(context.Background())
	l.heapIdx = -1
	l.until = until
	l.takenAt = time.Now()
	l.expiry = time.AfterFunc(time.Until(until), l.onExpiry)
}

// Token is the fencing token, 0 without fencing. Tokens for one key strictly increase
// across holders, of every client; a majority of nodes kept it before Acquire returned,
// so every later grant of the key draws a larger one (the package doc's Guarantees say
// under which assumptions).
func (l *Lock) Token() int64 { return l.token }

// validUntil is when the validity ends unless renewed.
func (l *Lock) validUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// validity is the remaining safe time, 0 once lost or released.
func (l *Lock) validity() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil || !l.state.live() {
		return 0
	}
	return max(time.Until(l.until), 0)
}

// err is nil while the lock is held, then a *LostError or ErrReleased (LockInfo.Err).
func (l *Lock) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// LockInfo describes a lock at one moment (Lock.Info). It never includes the lock's
// secret value.
type LockInfo struct {
	Key   string
	Token int64 // the fencing token, 0 without fencing
	// AcquiredAt is when Acquire was called (so time.Since(AcquiredAt) includes the wait).
	AcquiredAt time.Time
	// Attempts is how many Redlock rounds the acquire took (0 for a handed lock).
	Attempts int
	// Waited reports whether the acquire found the key held (by another client, or by
	// an earlier caller of this one) and waited for it.
	Waited bool
	// Handed reports whether the lock was handed over by the previous holder in this
	// process instead of being taken in Redis (Options.HandoffLimit).
	Handed   bool
	Renewals int           // successful renewals
	Validity time.Duration // the safe time left, 0 once lost or released
	// Err is nil while the lock is held, then a *LostError or ErrReleased: the cause of
	// Context's context.
	Err error
}

// Info describes the lock now.
func (l *Lock) Info() LockInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := LockInfo{Key: l.key, Token: l.token, AcquiredAt: l.acquiredAt, Attempts: l.attempts, Waited: l.waited,
		Handed: l.handed, Renewals: l.renewals, Err: l.cause}
	if l.cause == nil && l.state.live() {
		i.Validity = max(time.Until(l.until), 0)
	}
	return i
}

// Context returns a copy of parent that is also cancelled the moment the lock can no
// longer be trusted, with a *LostError as its cause (context.Cause): its validity ended
// without a renewal, a majority says someone else holds it or has no key, maxHold was
// reached, or ForceRelease. It is cancelled with ErrReleased when the lock is released.
// Run the work the lock protects under it. No goroutine waits meanwhile. Call cancel
// when done with it, as for context.WithCancel.
func (l *Lock) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	cctx, cancelCause := context.WithCancelCause(parent)
	if l.done.Err() != nil {
		cancelCause(context.Cause(l.done))
		return cctx, func() { cancelCause(nil) }
	}
	stop := context.AfterFunc(l.done, func() { cancelCause(context.Cause(l.done)) })
	return cctx, func() {
		stop()
		cancelCause(nil)
	}
}

func (l *Lock) onExpiry() {
	l.mu.Lock()
	if l.cause == nil && !time.Now().Before(l.until) {
		l.markLostLocked(&LostError{Key: l.key, Reason: LostExpired})
	}
	l.mu.Unlock()
}

func (l *Lock) markLost(reason LostReason) {
	l.mu.Lock()
	l.markLostLocked(&LostError{Key: l.key, Reason: reason})
	l.mu.Unlock()
}

func (l *Lock) markLostLocked(err error) {
	if l.cause != nil {
		return
	}
	l.cause = err
	if l.group != nil {
		l.group.broken.Store(true)
	}
	l.expiry.Stop()
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	l.endDone(err)
}

// extend renews the lock on all nodes at once, outside KeepAlive's schedule (tests use
// it). It succeeds only if a quorum renewed within the current validity; the new validity
// is counted from the moment extend began. Nodes where the key vanished (a restarted
// node) are re-taken with our value. A *LostError means the lock is gone for good; other
// errors are transient (retry while validity() > 0).
func (l *Lock) extend(ctx context.Context) (time.Duration, error) {
	if err := l.err(); err != nil {
		return 0, err
	}
	// Counted as a renewal in flight, so that Release waits for it: its re-takes must not
	// land after the release's deletes.
	if !l.c.renewer.begin(l) {
		return 0, ErrReleased
	}
	defer l.c.renewer.end(l)
	ctx, cancel := context.WithDeadline(ctx, l.validUntil())
	defer cancel()
	if err := l.c.extendBatch(ctx, []*Lock{l})[0]; err != nil {
		return 0, err
	}
	return l.validity(), nil
}

// applyExtend records one renewal round's outcome for this lock: yes nodes renewed it,
// no nodes said someone else holds it, absent nodes no longer have the key, errs are the
// nodes that failed.
func (l *Lock) applyExtend(start time.Time, yes, no, absent int, errs []error) error {
	c := l.c
	if yes >= c.quorum {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cause != nil {
			return l.cause
		}
		now := time.Now()
		if !now.Before(l.until) { // too late: the lock may have lapsed in between
			l.markLostLocked(&LostError{Key: l.key, Reason: LostExpired})
			return l.cause
		}
		newUntil := start.Add(l.ttl - drift(l.ttl, c.opt.DriftFactor))
		if newUntil.After(l.until) {
			l.until = newUntil
			l.expiry.Reset(newUntil.Sub(now))
		}
		l.renewals++
		return nil
	}
	// No majority is possible any more once more than N-quorum nodes say no or have no
	// key: someone else holds it, or it was deleted (an operator's force release).
	if no+absent > len(c.nodes)-c.quorum {
		reason := LostTaken
		if no <= len(c.nodes)-c.quorum {
			reason = LostVanished
		}
		l.markLost(reason)
		return l.err()
	}
	return fmt.Errorf("redlock: extend %q: renewed on %d of %d nodes, need %d: %w", l.key, yes, len(c.nodes), c.quorum, errors.Join(errs...))
}

// KeepAlive renews the lock every interval until Release, or until it is lost. When a
// renewal fails it retries sooner (interval/4) while validity remains; when validity ends
// the lock is lost (its Context is cancelled with a *LostError). maxHold > 0 caps the
// hold, counted from when this holder got the lock (its round's grant, or the handoff
// that gave it on; not the wait before): then the lock is marked lost (reason max_hold)
// and renewals stop, so a stuck holder cannot keep a key forever. Its key stays on the
// nodes until its validity ends or Release deletes it. Renewals of all locks of a client
// that fall due together go out in one script call per node; no goroutine runs per lock.
// Calling KeepAlive twice is an error.
func (l *Lock) KeepAlive(interval, maxHold time.Duration) error {
	if interval <= 0 || interval >= l.ttl {
		return fmt.Errorf("redlock: renew interval must be > 0 and < ttl (%v), got %v", l.ttl, interval)
	}
	l.mu.Lock()
	if l.keepAlive {
		l.mu.Unlock()
		return errors.New("redlock: KeepAlive already running")
	}
	if l.cause != nil || !l.state.live() {
		err := l.errLocked()
		l.mu.Unlock()
		return err
	}
	l.keepAlive = true
	if maxHold > 0 {
		l.maxHold = time.AfterFunc(time.Until(l.takenAt.Add(maxHold)), func() { l.markLost(LostMaxHold) })
	}
	// The first renewal is due interval after the lock was last taken or renewed in
	// Redis, not after now: a handed lock continues its predecessor's schedule, so a
	// chain of handoffs cannot postpone renewals until the lock lapses.
	first := l.lastRenewedLocked().Add(interval)
	l.mu.Unlock()
	l.c.renewer.add(l, interval, first)
	return nil
}

// lastRenewed is when the lock was last taken or renewed in Redis (its validity counts
// from then).
func (l *Lock) lastRenewed() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastRenewedLocked()
}

func (l *Lock) lastRenewedLocked() time.Time {
	return l.until.Add(-(l.ttl - drift(l.ttl, l.c.opt.DriftFactor)))
}

func (l *Lock) errLocked() error {
	if l.cause != nil {
		return l.cause
	}
	return ErrReleased
}

// Release deletes the lock on all nodes at once (compare-and-delete: never another
// holder's key) and notifies waiters. It uses ctx's values but not its cancellation: a
// release must go out even when the request that held the lock was cancelled; each node
// gets Options.NodeTimeout. It returns an error if fewer than a quorum confirmed, in which
// case the rest expires after the ttl. A lock already released gives ErrReleased.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	from := l.state
	if !l.moveLocked(releasing) {
		// Already released here, or being released by another call.
		l.mu.Unlock()
		return ErrReleased
	}
	l.mu.Unlock()
	if from == unreleased {
		// HandOver ended it here but could not hand it on: only Redis still has it.
		return l.releaseInRedis(ctx)
	}
	// First wait for a renewal in flight (none may land after the delete), and only then
	// judge whether the lock is still held: that renewal may just have found the key gone
	// (a force release elsewhere, an expiry across a pause) and marked the lock lost, and a
	// lost lock must never be handed on.
	l.c.renewer.remove(l)
	// A force release from here on may find the lock already ended here (markLost then
	// does nothing): the handoff checks for one against this mark.
	forces := l.c.queues.forceNow(l.key)
	if l.endLocally() && l.c.handoff(l, forces) {
		return nil
	}
	return l.releaseInRedis(ctx)
}

// HandOver is Release for a holder on a latency-critical path (a response being
// finished): it gives the lock to this client's next waiter for the key when that takes
// no Redis round trip (a waiter that asked for the same mode, ttl and fencing, within
// Options.HandoffLimit), and reports whether it did. It never blocks: not on
// the network, not on a renewal in flight (it then declines). When it returns false the
// caller must still call Release, which does whatever is left (it may be done elsewhere,
// e.g. in the background); HandOver and Release must not run concurrently.
func (l *Lock) HandOver() bool {
	c := l.c
	if !c.handoffLikely(l) || !c.renewer.stopIfIdle(l) {
		return false // nothing changed
	}
	// stopIfIdle moved the lock to releasing with no renewal in flight: its state is
	// final, as in Release after renewer.remove.
	forces := c.queues.forceNow(l.key)
	if l.endLocally() && c.handoff(l, forces) {
		return true
	}
	l.move(unreleased) // the waiter left meanwhile, or the lock was lost: Release deletes it
	return false
}

// endLocally ends the lock on this side once it is releasing and no renewal can run: it
// stops the timers, cancels the lock's Context with ErrReleased unless a loss already
// did, and reports whether the lock was still held (not lost), the condition for handing
// it on.
func (l *Lock) endLocally() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	trusted := l.cause == nil
	l.expiry.Stop()
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	if l.cause == nil {
		l.cause = ErrReleased
		l.endDone(ErrReleased)
	}
	return trusted
}

// releaseInRedis deletes the lock on all nodes and passes the baton to the next local
// waiter (after the deletes).
func (l *Lock) releaseInRedis(ctx context.Context) error {
	c := l.c
	if g := l.readGroup(); g != nil && !c.readers.leave(g) {
		l.move(released) // other readers of this client still hold the entry
		c.unregister(l)
		return nil
	}
	if c.opt.DisablePipelining {
		<-l.settled // the winning round's late SETs first (bounded by node_timeout)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.NodeTimeout)
	defer cancel()
	// The baton is the lock's only if its Acquire kept it (keep, before this release
	// began): a lock a force release released while provisional leaves it with its
	// Acquire.
	l.mu.Lock()
	t := l.baton
	l.mu.Unlock()
	subscribed := t != nil && t.subscribed()
	deleted, others, errs := c.releaseOnNodes(ctx, l.nm, l.value, nil, subscribed)
	l.move(released)
	c.unregister(l)
	// This client ignores its own notices (its line gets the turn directly); its readers
	// and, behind readers, its writers wait outside that line: wake them here.
	c.notices.poke(l.nm.channel)
	// The next local waiter goes after the keys are gone. If the notice reached other
	// clients' waiters, it lets them go first: else, being closer, it would win every time.
	// So it does for this client's readers waiting for the key (readgroup.go, phases).
	if t != nil {
		t.pass(others || c.readers.readersWait(l.key))
	}
	if len(errs) > len(c.nodes)-c.quorum {
		return fmt.Errorf("redlock: release %q: %d nodes did not answer (deleted on %d); the rest expires after the ttl: %w",
			l.key, len(errs), deleted, errors.Join(errs...))
	}
	return nil
}
