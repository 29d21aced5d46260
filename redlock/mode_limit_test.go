package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Many holders of two clients on one key with Limit 3: never more than 3 inside, and 3
// reached (the limit is not stricter than it says).
func TestLimitHolders(t *testing.T) {
	servers := redistest.StartN(t, 3)
	const workers, iterations = 5, 8
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for ci := 0; ci < 2; ci++ {
		c := newTestClient(t, servers, fastOptions())
		for w := 0; w < workers; w++ {
			wg.Go(func() {
				for i := 0; i < iterations; i++ {
					l, err := c.Acquire(context.Background(), "pool", AcquireOptions{Limit: 3, Wait: 20 * time.Second, Fencing: true})
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if n > 3 {
						t.Errorf("%d holders of a key limited to 3", n)
					}
					time.Sleep(5 * time.Millisecond) // the hold: a workload's duration
					inside.Add(-1)
					if err := l.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if most.Load() != 3 {
		t.Fatalf("at most %d holders at once, want the limit 3 reached", most.Load())
	}
}

// The places are ordinary locks, released and renewed as such; a full key is busy, and a
// waiter gets a place as soon as one is released, by the notice, not by polling (the
// retry delay is set far longer than the test waits), also when the holder is of the
// same client (which ignores its own notices from Redis).
func TestLimitWaiterWokenByRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := notifyOptions()
	opt.TTL = 10 * time.Second // the holders' remaining ttl must not cut the waiter's sleep short
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	lim := AcquireOptions{Limit: 2}
	l1 := mustAcquire(t, a, "pool", lim)
	l2 := mustAcquire(t, b, "pool", lim)
	if l1.key != "pool" || l2.key != "pool" {
		t.Fatalf("keys %q %q, want the user's key", l1.key, l2.key)
	}
	if _, err := l1.extend(context.Background()); err != nil {
		t.Fatalf("extend a place: %v", err)
	}
	if _, err := a.Acquire(context.Background(), "pool", lim); !isBusy(err) {
		t.Fatalf("third holder of a key limited to 2: %v, want busy", err)
	}
	for _, tc := range []struct {
		name     string
		waiter   *Client
		released *Lock
	}{{"other client's release", b, l1}, {"own client's release", b, l2}} {
		got := make(chan error, 1)
		go func() {
			l, err := tc.waiter.Acquire(context.Background(), "pool", AcquireOptions{Limit: 2, Wait: 10 * time.Second})
			if err == nil {
				t.Cleanup(func() { _ = l.Release(context.Background()) })
			}
			got <- err
		}()
		if !eventually(3*time.Second, func() bool { return watching(tc.waiter, "pool") }) {
			t.Fatal("timed out waiting for: the waiter waits for a release notice")
		}
		released := time.Now()
		if err := tc.released.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: waiter: %v", tc.name, err)
		}
		if d := time.Since(released); d > opt.RetryDelayMin/2 {
			t.Errorf("%s: waiter took %v after the release: notice not received?", tc.name, d)
		}
	}
}

// A client's waiters for a limited key get their places in arrival order.
func TestLimitLocalWaitersFIFO(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	lim := AcquireOptions{Limit: 2, Wait: 10 * time.Second}
	h1, h2 := mustAcquire(t, c, "pool", lim), mustAcquire(t, c, "pool", lim)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			l, err := c.Acquire(context.Background(), "pool", lim)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // the hold: a workload's duration
			_ = l.Release(context.Background())
		})
		// Arrive in order: the first takes the line's baton, the others queue behind it.
		if !eventually(3*time.Second, func() bool {
			return c.queues.writerWaits("pool") && c.Status().Waiting["pool"] == i
		}) {
			t.Fatal("timed out waiting for: waiter in line")
		}
	}
	_ = h1.Release(context.Background())
	_ = h2.Release(context.Background())
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters served in order %v, want arrival order", order)
		}
	}
}

func TestLimitBadInput(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	for _, o := range []AcquireOptions{{Limit: -1}, {Limit: MaxLimit + 1}, {Limit: 2, Shared: true}} {
		if _, err := c.Acquire(context.Background(), "k", o); err == nil || isBusy(err) {
			t.Errorf("%+v: %v, want an error", o, err)
		}
	}
}

// An operator's force release frees every place of a limited key.
func TestLimitForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	lim := AcquireOptions{Limit: 2}
	l1, l2 := mustAcquire(t, c, "pool", lim), mustAcquire(t, c, "pool", lim)
	if _, err := c.ForceRelease(context.Background(), "pool"); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lock{l1, l2} {
		if !isLost(l.err()) {
			t.Fatalf("holder after force release: %v", l.err())
		}
	}
	other := newTestClient(t, servers, fastOptions())
	for range 2 {
		_ = mustAcquire(t, other, "pool", AcquireOptions{Limit: 2, Wait: time.Second})
	}
}

// Inspect shows a limited key's places: its holders hold places, not the key's own
// name, which an operator would otherwise see as "not held".
func TestInspectShowsPlaces(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	mine, err := a.Acquire(ctx, "lim", AcquireOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Release(ctx)
	theirs, err := b.Acquire(ctx, "lim", AcquireOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Release(ctx)
	st, err := a.Inspect(ctx, "lim")
	if err != nil {
		t.Fatal(err)
	}
	held, here := 0, 0
	for _, p := range st.Places {
		if p.QuorumHeld {
			held++
		}
		if p.HeldHere {
			here++
		}
	}
	if len(st.Places) != 2 || held != 2 || here != 1 {
		t.Fatalf("places %+v: want 2 held, 1 of them here", st.Places)
	}
}
