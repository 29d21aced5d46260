package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// HandOver gives the lock to a queued waiter of the same client with no command to any
// node, and the old holder is then released for good.
func TestHandOverHandsToWaiterWithoutRedis(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l1, err := c.Acquire(context.Background(), "ho", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.KeepAlive(500*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, c, "ho", AcquireOptions{Wait: 5 * time.Second})
	resetStats(t, servers)
	if !l1.HandOver() {
		t.Fatal("HandOver declined with a waiter queued")
	}
	l2 := receive(t, waiter)
	if !l2.Info().Handed || l2.err() != nil || l2.validity() <= 0 {
		t.Fatalf("handed=%v err=%v validity=%v: want a valid handed lock", l2.Info().Handed, l2.err(), l2.validity())
	}
	for i, s := range servers {
		if n := evalCalls(t, s); n != 0 {
			t.Fatalf("node %d ran %d scripts during HandOver, want 0", i, n)
		}
	}
	if l1.err() != ErrReleased {
		t.Fatalf("old holder: Err %v, want ErrReleased", l1.err())
	}
	if err := l1.Release(context.Background()); err != ErrReleased {
		t.Fatalf("Release after a HandOver: %v, want ErrReleased (nothing left to do)", err)
	}
	if h := c.holding("ho"); h != l2 {
		t.Fatalf("Holding lists %p, want the handed lock %p", h, l2)
	}
	if err := l2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Without a waiter HandOver declines and changes nothing: the lock stays held and
// renewed, and Release then deletes it as usual.
func TestHandOverWithoutWaiterChangesNothing(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "alone", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if l.HandOver() {
		t.Fatal("HandOver with nobody waiting reported a handoff")
	}
	if l.err() != nil {
		t.Fatalf("lock changed by a declined HandOver: %v", l.err())
	}
	r0 := l.Info().Renewals
	if !eventually(3*time.Second, func() bool { return l.Info().Renewals >= r0+2 }) {
		t.Fatal("timed out waiting for: renewals go on after a declined HandOver")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if _, ok := rawGet(t, s, "alone"); ok {
			t.Fatalf("node %d still holds the key after Release", i)
		}
	}
}

// HandOver never waits for a renewal in flight (it would block a response for up to a
// node timeout): it declines, and Release, which may wait, does the job.
func TestHandOverDeclinesWhileRenewalInFlight(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL, opt.NodeTimeout = 10*time.Second, 2*time.Second // the paused renewal stays in flight long enough
	c := newTestClient(t, servers, opt)
	l, err := c.Acquire(context.Background(), "busy-renew", AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, c, "busy-renew", AcquireOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.KeepAlive(50*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return l.renewInFlight > 0
	}) {
		t.Fatal("timed out waiting for: a renewal in flight")
	}
	if l.HandOver() {
		t.Fatal("HandOver went ahead with a renewal in flight")
	}
	if l.err() != nil {
		t.Fatalf("declined HandOver changed the lock: %v", l.err())
	}
	for _, s := range servers {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l2 := receive(t, waiter); !l2.Info().Handed {
		t.Fatal("Release after the renewal did not hand the lock on")
	} else if err := l2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// When HandOver has released the lock locally but could not hand it on (the waiter left
// in between), the Release the caller makes next still deletes the key in Redis.
func TestReleaseAfterFailedHandOverDeletesInRedis(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "pending", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The state HandOver leaves after its handoff found no waiter any more.
	if !c.renewer.stopIfIdle(l) {
		t.Fatal("no renewal should be in flight")
	}
	if !l.endLocally() {
		t.Fatal("the lock was held")
	}
	if !l.move(unreleased) {
		t.Fatal("releasing -> unreleased refused")
	}

	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release of a pending lock: %v", err)
	}
	// Release returns once a quorum deleted the key; the last delete lands within a node
	// timeout (300ms), far inside the ttl (2s) the key would otherwise stand for.
	for i, s := range servers {
		if !eventually(fastOptions().NodeTimeout+200*time.Millisecond, func() bool { _, ok := rawGet(t, s, "pending"); return !ok }) {
			t.Fatalf("node %d still holds the key", i)
		}
	}
	if err := l.Release(context.Background()); err != ErrReleased {
		t.Fatalf("second Release: %v, want ErrReleased", err)
	}
	if _, err := c.Acquire(context.Background(), "pending", AcquireOptions{}); err != nil {
		t.Fatalf("key not free after the pending release: %v", err)
	}
}

// Lock.Context is cancelled the moment the lock is lost, with the *LostError as its
// cause; on release with ErrReleased; on a lock already lost at once; and it follows its
// parent (and its own cancel) like any derived context.
func TestContext(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	acquire := func(key string) *Lock {
		l, err := c.Acquire(context.Background(), key, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	done := func(ctx context.Context, what string) error {
		t.Helper()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: context not done", what)
			return nil
		}
	}

	l := acquire("ctx-lost")
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatalf("context of a held lock is done: %v", context.Cause(ctx))
	}
	if _, err := c.ForceRelease(context.Background(), "ctx-lost"); err != nil {
		t.Fatal(err)
	}
	var le *LostError
	if cause := done(ctx, "force released"); !errors.As(cause, &le) || le.Reason != LostForceReleased || le.Key != "ctx-lost" {
		t.Fatalf("cause %v, want a LostError for ctx-lost with reason %s", cause, LostForceReleased)
	}
	late, cancelLate := l.Context(context.Background()) // already lost: done at once
	defer cancelLate()
	if late.Err() == nil || !isLost(context.Cause(late)) {
		t.Fatalf("context of a lost lock: err %v cause %v", late.Err(), context.Cause(late))
	}

	released := acquire("ctx-released")
	rctx, rcancel := released.Context(context.Background())
	defer rcancel()
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cause := done(rctx, "released"); cause != ErrReleased {
		t.Fatalf("cause after release %v, want ErrReleased", cause)
	}

	held := acquire("ctx-parent")
	defer held.Release(context.Background())
	parent, cancelParent := context.WithCancelCause(context.Background())
	pctx, pcancel := held.Context(parent)
	defer pcancel()
	cancelParent(errors.New("client went away"))
	if cause := done(pctx, "parent cancelled"); cause == nil || isLost(cause) || cause.Error() != "client went away" {
		t.Fatalf("cause after the parent ended %v, want the parent's", cause)
	}
	own, cancelOwn := held.Context(context.Background())
	cancelOwn()
	if cause := done(own, "cancelled"); cause != context.Canceled {
		t.Fatalf("cause after cancel %v, want context.Canceled", cause)
	}
	if held.Info().Err != nil {
		t.Fatalf("cancelling a lock's context must not touch the lock: %v", held.Info().Err)
	}
}
