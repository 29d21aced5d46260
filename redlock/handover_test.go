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
	if !l2.Handed() || l2.Err() != nil || l2.Validity() <= 0 {
		t.Fatalf("handed=%v err=%v validity=%v: want a valid handed lock", l2.Handed(), l2.Err(), l2.Validity())
	}
	for i, s := range servers {
		if n := evalCalls(t, s); n != 0 {
			t.Fatalf("node %d ran %d scripts during HandOver, want 0", i, n)
		}
	}
	if l1.Err() != ErrReleased {
		t.Fatalf("old holder: Err %v, want ErrReleased", l1.Err())
	}
	if err := l1.Release(context.Background()); err != ErrReleased {
		t.Fatalf("Release after a HandOver: %v, want ErrReleased (nothing left to do)", err)
	}
	if h := c.Holding("ho"); h != l2 {
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
	if l.Err() != nil {
		t.Fatalf("lock changed by a declined HandOver: %v", l.Err())
	}
	r0 := l.Renewals()
	eventually(t, "renewals go on after a declined HandOver", func() bool { return l.Renewals() >= r0+2 })
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
	eventually(t, "a renewal in flight", func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return l.renewInFlight > 0
	})
	if l.HandOver() {
		t.Fatal("HandOver went ahead with a renewal in flight")
	}
	if l.Err() != nil {
		t.Fatalf("declined HandOver changed the lock: %v", l.Err())
	}
	for _, s := range servers {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l2 := receive(t, waiter); !l2.Handed() {
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
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	if !l.endLocally() {
		t.Fatal("the lock was held")
	}
	l.mu.Lock()
	l.pendingRelease = true
	l.mu.Unlock()

	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release of a pending lock: %v", err)
	}
	for i, s := range servers {
		if _, ok := rawGet(t, s, "pending"); ok {
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

// OnLost runs its callback once the lock is lost, with the reason, and not after stop or
// on release; registered on a lost lock it runs at once.
func TestOnLost(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	acquire := func(key string) *Lock {
		l, err := c.Acquire(context.Background(), key, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	l := acquire("onlost")
	got := make(chan error, 2)
	stopped := acquire("onlost-stopped")
	stop := stopped.OnLost(func(err error) { got <- err })
	if !stop() || !stop() {
		t.Fatal("stop before the loss must report that the callback never runs")
	}
	released := acquire("onlost-released")
	released.OnLost(func(err error) { got <- err })
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopLost := l.OnLost(func(err error) { got <- err })
	if _, err := c.ForceRelease(context.Background(), "onlost"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		var le *LostError
		if !errors.As(err, &le) || le.Reason != LostForceReleased {
			t.Fatalf("callback got %v, want a LostError with reason %s", err, LostForceReleased)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost callback did not run when the lock was force released")
	}
	if stopLost() {
		t.Fatal("stop after the callback started must report false")
	}
	l.OnLost(func(err error) { got <- err }) // already lost: runs at once
	select {
	case err := <-got:
		if !errors.Is(err, ErrLost) {
			t.Fatalf("late callback got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost on a lost lock did not run")
	}
	stopped.Release(context.Background())
	select {
	case err := <-got:
		t.Fatalf("a stopped or released lock's callback ran: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}
