package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Lock is a held Redlock. Its methods are safe for concurrent use.
type Lock struct {
	c          *Client
	nm         names
	key        string
	value      string // secret: never logged, shown or returned
	ttl        time.Duration
	token      int64
	fencing    bool
	acquiredAt time.Time // when Acquire was called
	attempts   int
	q          *keyQueue
	settled    <-chan struct{} // the winning round's stragglers have replied

	mu       sync.Mutex
	until    time.Time // validity ends (monotonic)
	renewals int
	released bool
	lostErr  error
	lost     chan struct{}
	expiry   *time.Timer // marks the lock lost when validity ends without renewal
	maxHold  *time.Timer
	stopKA   chan struct{} // closed by Release to end KeepAlive
	kaDone   chan struct{} // closed when KeepAlive's goroutine returns
}

// start arms the validity timer of a freshly acquired lock (all other fields set).
func (l *Lock) start(roundStart time.Time, validity time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = make(chan struct{})
	l.stopKA = make(chan struct{})
	l.until = roundStart.Add(l.ttl - drift(l.ttl, l.c.opt.DriftFactor))
	l.expiry = time.AfterFunc(validity, l.onExpiry)
}

// Key is the lock's key (without prefix).
func (l *Lock) Key() string { return l.key }

// Token is the fencing token, 0 without fencing. Tokens for one key strictly increase
// across holders; it was committed on a majority before Acquire returned.
func (l *Lock) Token() int64 { return l.token }

// Fencing reports whether the lock carries a fencing token.
func (l *Lock) Fencing() bool { return l.fencing }

// AcquiredAt is when Acquire was called (so Since(AcquiredAt) includes the wait).
func (l *Lock) AcquiredAt() time.Time { return l.acquiredAt }

// Attempts is how many Redlock rounds the acquire took.
func (l *Lock) Attempts() int { return l.attempts }

// Until is when the validity ends unless renewed.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Validity is the remaining safe time, 0 once lost or released.
func (l *Lock) Validity() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil || l.released {
		return 0
	}
	return max(time.Until(l.until), 0)
}

// Renewals counts successful extensions.
func (l *Lock) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// Lost is closed the moment the lock can no longer be trusted (validity ended without a
// renewal, a majority says someone else holds it, max hold reached, force release) and
// also when it is released. Err says which.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lock is held; after Lost is closed it is a *LostError or ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

func (l *Lock) onExpiry() {
	l.mu.Lock()
	if l.lostErr == nil && !time.Now().Before(l.until) {
		l.markLostLocked(&LostError{Key: l.key, Reason: LostExpired})
	}
	l.mu.Unlock()
}

func (l *Lock) markLost(reason string) {
	l.mu.Lock()
	l.markLostLocked(&LostError{Key: l.key, Reason: reason})
	l.mu.Unlock()
}

func (l *Lock) markLostLocked(err error) {
	if l.lostErr != nil {
		return
	}
	l.lostErr = err
	l.expiry.Stop()
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	close(l.lost)
}

// Extend renews the lock on all nodes at once. It succeeds only if a quorum renewed
// within the current validity; the new validity is counted from the moment Extend began.
// Nodes where the key vanished (a restarted node) are re-taken with our value. An error
// that errors.Is ErrLost means the lock is gone for good; other errors are transient
// (retry while Validity() > 0).
func (l *Lock) Extend(ctx context.Context) (time.Duration, error) {
	if err := l.Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, l.Until())
	defer cancel()
	c := l.c
	yes, taken, errs := c.onAll(ctx, "extend", nil, func(cctx context.Context, nd *node) (bool, error) {
		if !nd.quarantinedUntil(time.Now()).IsZero() {
			return false, errors.New("quarantined after restart")
		}
		r, err := extendScript.Run(cctx, nd.client, []string{l.nm.lock}, l.value, l.ttl.Milliseconds()).Int64Slice()
		if err != nil {
			return false, err
		}
		if len(r) != 1 {
			return false, fmt.Errorf("unexpected extend reply %v", r)
		}
		return r[0] != 0, nil
	}, 0) // wait for every node: a re-take that landed after our release would stand for a ttl
	if yes >= c.quorum {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lostErr != nil {
			return 0, l.lostErr
		}
		now := time.Now()
		if !now.Before(l.until) { // too late: the lock may have lapsed in between
			l.markLostLocked(&LostError{Key: l.key, Reason: LostExpired})
			return 0, l.lostErr
		}
		newUntil := start.Add(l.ttl - drift(l.ttl, c.opt.DriftFactor))
		if newUntil.After(l.until) {
			l.until = newUntil
			l.expiry.Reset(newUntil.Sub(now))
		}
		l.renewals++
		return l.until.Sub(now), nil
	}
	if taken > len(c.nodes)-c.quorum { // enough nodes say someone else holds it: no majority is possible

		l.markLost(LostTaken)
		return 0, l.Err()
	}
	return 0, fmt.Errorf("redlock: extend %q: renewed on %d of %d nodes, need %d: %w", l.key, yes, len(c.nodes), c.quorum, errors.Join(errs...))
}

// KeepAlive renews the lock every interval until Release, or until it is lost. When a
// renewal fails it retries sooner (interval/4) while validity remains; when validity ends
// Lost is closed. maxHold > 0 caps the total hold: at AcquiredAt+maxHold the lock is
// marked lost (reason max_hold) and renewals stop, so a stuck holder cannot keep a key
// forever. Calling KeepAlive twice is an error.
func (l *Lock) KeepAlive(interval, maxHold time.Duration) error {
	if interval <= 0 || interval >= l.ttl {
		return fmt.Errorf("redlock: renew interval must be > 0 and < ttl (%v), got %v", l.ttl, interval)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kaDone != nil {
		return errors.New("redlock: KeepAlive already running")
	}
	if l.released || l.lostErr != nil {
		return l.errLocked()
	}
	if maxHold > 0 {
		l.maxHold = time.AfterFunc(time.Until(l.acquiredAt.Add(maxHold)), func() { l.markLost(LostMaxHold) })
	}
	l.kaDone = make(chan struct{})
	go l.keepAlive(interval)
	return nil
}

func (l *Lock) errLocked() error {
	if l.lostErr != nil {
		return l.lostErr
	}
	return ErrReleased
}

func (l *Lock) keepAlive(interval time.Duration) {
	defer close(l.kaDone)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stopKA:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		_, err := l.Extend(context.Background())
		if obs := l.c.opt.Observer; obs != nil {
			obs.Renewal(err)
		}
		switch {
		case err == nil:
			t.Reset(interval)
		case errors.Is(err, ErrLost):
			l.c.opt.Logger.Debug("lock lost during renewal", zap.String("key", l.key), zap.Error(err))
			return
		default:
			t.Reset(max(interval/4, time.Millisecond))
		}
	}
}

// Release deletes the lock on all nodes at once (compare-and-delete: never another
// holder's key) and notifies waiters. It uses ctx's values but not its cancellation: a
// release must go out even when the request that held the lock was cancelled; each node
// gets node_timeout. It returns an error if fewer than a quorum confirmed, in which case
// the rest expires after the ttl.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return ErrReleased
	}
	l.released = true
	l.expiry.Stop()
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	if l.lostErr == nil {
		l.lostErr = ErrReleased
		close(l.lost)
	}
	close(l.stopKA)
	kaDone := l.kaDone
	l.mu.Unlock()
	if kaDone != nil {
		<-kaDone // no renewal may land after the delete
	}

	c := l.c
	<-l.settled // bounded by node_timeout; usually long closed
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.NodeTimeout)
	defer cancel()
	deleted, _, errs := c.releaseOnNodes(ctx, l.nm, l.value, nil)
	c.unregister(l)
	c.queues.done(l.q) // the next local waiter goes after the keys are gone
	if len(errs) > len(c.nodes)-c.quorum {
		return fmt.Errorf("redlock: release %q: %d nodes did not answer (deleted on %d); the rest expires after the ttl: %w",
			l.key, len(errs), deleted, errors.Join(errs...))
	}
	return nil
}
