package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// AcquireAll may wait for a later key longer than the ttl: the keys it took meanwhile
// stay held (renewed), nobody else gets them, and every lock it returns is valid.
func TestAcquireAllKeepsEarlierKeysWhileWaitingLong(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-second wait (-short)")
	}
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = time.Second
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	ctx := context.Background()
	busy, err := b.Acquire(ctx, "z", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.KeepAlive(300*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	done := acquireAllLater(a, []string{"a", "z"}, 10*time.Second)
	// "a" is taken first, "z" is busy for 3 ttls: meanwhile "a" stays held by the same
	// lock (its value never changes: it did not lapse and was not taken again), and
	// nobody else may take it.
	var first string
	if !eventually(3*time.Second, func() bool { v, ok := rawGet(t, servers[0], "a"); first = v; return ok }) {
		t.Fatal("timed out waiting for: a taken")
	}
	until := time.Now().Add(3 * opt.TTL)
	for time.Now().Before(until) {
		if v, _ := rawGet(t, servers[0], "a"); v != first {
			t.Fatalf("the lock on a lapsed while AcquireAll waited for z (value %q, was %q)", v, first)
		}
		if l, err := b.Acquire(ctx, "a", AcquireOptions{}); err == nil {
			l.Release(ctx)
			t.Fatal("another client took a key AcquireAll had taken, while it waited for the next")
		} else if !isBusy(err) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the checks' pace over the 3 ttls under test
	}
	if err := busy.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("AcquireAll: %v", r.err)
	}
	for _, l := range r.locks {
		if i := l.Info(); i.Err != nil || i.Validity <= 0 {
			t.Fatalf("%s returned lapsed: %+v", i.Key, i)
		}
		if err := l.KeepAlive(300*time.Millisecond, 0); err != nil {
			t.Fatalf("KeepAlive after AcquireAll: %v", err)
		}
	}
	for _, l := range r.locks {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A lock AcquireAll took is lost while it waits for the next (force released): the set is
// given back and taken again within the wait, and what it returns is held.
func TestAcquireAllRetakesASetWhoseEarlierKeyWasLost(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	busy, err := b.Acquire(ctx, "z", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := acquireAllLater(a, []string{"a", "z"}, 5*time.Second)
	if !eventually(3*time.Second, func() bool { return a.holding("a") != nil }) {
		t.Fatal("timed out waiting for: a held by the set")
	}
	if _, err := a.ForceRelease(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := busy.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("AcquireAll: %v", r.err)
	}
	for _, l := range r.locks {
		if i := l.Info(); i.Err != nil || i.Validity <= 0 {
			t.Fatalf("%s returned lost: %+v", i.Key, i)
		}
		if _, ok := rawGet(t, servers[0], l.key); !ok {
			t.Fatalf("%s is not in Redis", l.key)
		}
	}
	for _, l := range r.locks {
		_ = l.Release(ctx)
	}
}

// setResult is what an AcquireAll returned.
type setResult struct {
	locks []*Lock
	err   error
}

// acquireAllLater runs AcquireAll of keys in the background; its result arrives on the
// channel.
func acquireAllLater(c *Client, keys []string, wait time.Duration) <-chan setResult {
	done := make(chan setResult, 1)
	go func() {
		ls, err := c.AcquireAll(context.Background(), keys, AcquireOptions{Wait: wait})
		done <- setResult{ls, err}
	}()
	return done
}
